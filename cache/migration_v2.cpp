#include "cache/migration_v2.h"

#include <SQLiteCpp/SQLiteCpp.h>

#include <cstdint>
#include <regex>
#include <stdexcept>
#include <vector>

namespace kt {
namespace db {

namespace {

const char* const kLoads[] = {"register_ring", "bulk_rows", "tma", "tma_x"};

int field(const nlohmann::json& j, const char* name, int fallback = -1) {
  if (!j.contains(name)) {
    if (fallback >= 0) return fallback;
    throw std::invalid_argument(std::string("schema-1 qkv_proj config without '") + name + "': " + j.dump());
  }
  return j.at(name).get<int>();
}

/// The schema-2 name of a config part from its schema-2 JSON (the format of qkv::variant_name).
std::string name_of(const nlohmann::json& c) {
  const std::string ml = c.at("mainloop");
  const nlohmann::json& f = c.at(ml);
  std::string s =
      ml + "_m" + std::to_string(c.at("tile_m").get<int>()) + "_n" + std::to_string(c.at("tile_n").get<int>());
  auto num = [&](const char* k) { return std::to_string(f.at(k).get<int>()); };
  if (ml == "mma")
    return s + "_k" + num("tile_k") + "_w" + num("warps_m") + "x" + num("warps_n") + "_s" + num("stages") + "_sk" +
           num("split_k") + "_p" + num("prefetch");
  if (ml == "gemv") {
    const std::string red = f.at("reduce");
    return s + "_wk" + num("warps_k") + "_wn" + num("warps_n") + "_" + f.at("load").get<std::string>() + "_p" +
           num("prefetch") +
           (red == "cluster"         ? "_cl" + num("cluster")
            : red == "balanced_tail" ? "_bal"
                                     : "_nored");
  }
  if (ml == "wgmma")
    return s + "_k" + num("tile_k") + "_s" + num("stages") + "_sk" + num("split_k") + "_p" + num("prefetch");
  if (ml == "wgmma_ws")
    return s + "_c" + num("consumers") + "_kg" + num("k_groups") + "_s" + num("stages") +
           (f.at("split") == "stream_k" ? std::string("_streamk") : "_sk" + num("split_k"));
  return s + "_s" + num("stages") + "_cm" + num("cluster_m");  // wgmma_pairs
}

}  // namespace

nlohmann::json qkv_config_v1_to_v2(const nlohmann::json& o) {
  if (!o.is_object()) throw std::invalid_argument("schema-1 qkv_proj config is not an object: " + o.dump());
  const std::string ml = o.value("mainloop", std::string("mma"));
  nlohmann::json n = {{"mainloop", ml}, {"tile_m", field(o, "tile_m")}, {"tile_n", field(o, "tile_n")}};
  const int wm = field(o, "warps_m"), wn = field(o, "warps_n"), st = field(o, "stages"), sk = field(o, "split_k"),
            pf = field(o, "prefetch", 1);
  if (ml == "mma") {
    n["mma"] = {{"tile_k", field(o, "tile_k")},
                {"warps_m", wm},
                {"warps_n", wn},
                {"stages", st},
                {"split_k", sk},
                {"prefetch", pf}};
  } else if (ml == "gemv") {
    if (st < 0 || st > 3)
      throw std::invalid_argument("schema-1 gemv config with stages " + std::to_string(st) + ": " + o.dump());
    n["gemv"] = {{"warps_k", wm},
                 {"warps_n", wn},
                 {"load", kLoads[st]},
                 {"prefetch", pf},
                 {"reduce", sk == 0   ? "balanced_tail"
                            : sk == 1 ? "none"
                                      : "cluster"},
                 {"cluster", sk > 1 ? sk : 1}};
  } else if (ml == "wgmma") {
    n["wgmma"] = {{"tile_k", field(o, "tile_k")}, {"stages", st}, {"split_k", sk}, {"prefetch", pf}};
  } else if (ml == "wgmma_ws") {
    n["wgmma_ws"] = {{"consumers", wm / 4},
                     {"k_groups", wn},
                     {"stages", st},
                     {"split", sk == 0 ? "stream_k" : "split_k"},
                     {"split_k", sk == 0 ? 1 : sk}};
  } else if (ml == "wgmma_pairs") {
    n["wgmma_pairs"] = {{"stages", st}, {"cluster_m", field(o, "cluster_m", 1)}};
  } else {
    throw std::invalid_argument("schema-1 qkv_proj config with unknown mainloop '" + ml + "'");
  }
  return n;
}

std::string qkv_variant_v1_to_v2(const std::string& old) {
  // qkv_proj__<class>__<config>__<arch>
  const size_t a = old.find("__"), b = old.find("__", a == std::string::npos ? a : a + 2), c = old.rfind("__");
  if (a == std::string::npos || b == std::string::npos || c <= b)
    throw std::invalid_argument("not a qkv_proj variant name: '" + old + "'");
  const std::string cfg = old.substr(b + 2, c - b - 2);
  std::smatch m;
  auto i = [&](int k) { return std::stoi(m[size_t(k)].str()); };
  nlohmann::json o;
  static const std::regex mma(R"(m(\d+)_n(\d+)_k(\d+)_w(\d+)x(\d+)_s(\d+)_sk(\d+)_p(\d+))");
  static const std::regex gemv(R"(gemv_m(\d+)_n(\d+)_w(\d+)x(\d+)_s(\d)_p(\d+)(_cl(\d+)|_bal)?)");
  static const std::regex wgmma(R"(wgmma_m(\d+)_n(\d+)_k(\d+)_s(\d+)_sk(\d+)_p(\d+))");
  static const std::regex ws(R"(wgmma_ws_m(\d+)_n(\d+)_c(\d)_s(\d+)(_streamk|_sk1|_cl(\d+))(_kg(\d))?)");
  static const std::regex pairs(R"(wgmma_pairs_m(\d+)_n(\d+)_s(\d+)(_cm(\d))?)");
  if (std::regex_match(cfg, m, mma))
    o = {{"mainloop", "mma"}, {"tile_m", i(1)}, {"tile_n", i(2)},  {"tile_k", i(3)},  {"warps_m", i(4)},
         {"warps_n", i(5)},   {"stages", i(6)}, {"split_k", i(7)}, {"prefetch", i(8)}};
  else if (std::regex_match(cfg, m, gemv))
    o = {{"mainloop", "gemv"}, {"tile_m", i(1)},
         {"tile_n", i(2)},     {"warps_m", i(3)},
         {"warps_n", i(4)},    {"stages", i(5)},
         {"prefetch", i(6)},   {"split_k", m[8].matched ? i(8) : m[7].matched ? 0 : 1}};
  else if (std::regex_match(cfg, m, wgmma))
    o = {{"mainloop", "wgmma"}, {"tile_m", i(1)}, {"tile_n", i(2)},  {"tile_k", i(3)},  {"warps_m", i(1) / 16},
         {"warps_n", 1},        {"stages", i(4)}, {"split_k", i(5)}, {"prefetch", i(6)}};
  else if (std::regex_match(cfg, m, ws))
    o = {{"mainloop", "wgmma_ws"},
         {"tile_m", i(1)},
         {"tile_n", i(2)},
         {"warps_m", 4 * i(3)},
         {"warps_n", m[8].matched ? i(8) : 1},
         {"stages", i(4)},
         {"split_k", m[6].matched               ? i(6)
                     : m[5].str() == "_streamk" ? 0
                                                : 1}};
  else if (std::regex_match(cfg, m, pairs))
    o = {{"mainloop", "wgmma_pairs"},
         {"tile_m", i(1)},
         {"tile_n", i(2)},
         {"warps_m", i(1) / 16},
         {"warps_n", 1},
         {"stages", i(3)},
         {"split_k", 1},
         {"cluster_m", m[5].matched ? i(5) : 1}};
  else throw std::invalid_argument("qkv_proj variant '" + old + "': '" + cfg + "' is not a schema-1 config name");
  return old.substr(0, b + 2) + name_of(qkv_config_v1_to_v2(o)) + old.substr(c);
}

void migrate_qkv_configs_v1_to_v2(SQLite::Database& db) {
  auto fail = [](const std::string& table, long long row, const std::exception& e) {
    throw std::runtime_error("migrating qkv_proj configs to schema 2: " + table + " row " + std::to_string(row) + ": " +
                             e.what() + " (delete that row with the sqlite3 shell, or tune into a new database)");
  };
  struct Row {
    long long id;
    std::string name, json;
  };
  std::vector<Row> rows;  // read first, then written: no update under a running scan
  {
    SQLite::Statement q(db, "SELECT id, variant_name, config_json FROM measurements WHERE family = 'qkv_proj'");
    while (q.executeStep()) {
      const long long id = q.getColumn(0).getInt64();
      try {
        rows.push_back({id, qkv_variant_v1_to_v2(q.getColumn(1).getString()),
                        qkv_config_v1_to_v2(nlohmann::json::parse(q.getColumn(2).getString())).dump()});
      } catch (const std::exception& e) {
        fail("measurements", id, e);
      }
    }
  }
  SQLite::Statement up(db, "UPDATE measurements SET variant_name = ?, config_json = ? WHERE id = ?");
  for (const Row& r : rows) {
    up.bind(1, r.name);
    up.bind(2, r.json);
    up.bind(3, static_cast<int64_t>(r.id));
    up.exec();
    up.reset();
  }
  rows.clear();
  {
    SQLite::Statement q(db, "SELECT rowid, variant_name FROM binaries WHERE family = 'qkv_proj'");
    while (q.executeStep()) {
      const long long id = q.getColumn(0).getInt64();
      try {
        rows.push_back({id, qkv_variant_v1_to_v2(q.getColumn(1).getString()), ""});
      } catch (const std::exception& e) {
        fail("binaries", id, e);
      }
    }
  }
  SQLite::Statement upb(db, "UPDATE binaries SET variant_name = ? WHERE rowid = ?");
  for (const Row& r : rows) {
    upb.bind(1, r.name);
    upb.bind(2, static_cast<int64_t>(r.id));
    upb.exec();
    upb.reset();
  }
}

}  // namespace db
}  // namespace kt
