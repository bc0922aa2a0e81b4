// Tuning database migration 1 -> 2: qkv_proj configs from the flat fields of schema 1, whose meaning depended on the
// mainloop (stages picked gemv's load strategy, split_k 0 meant stream-K in wgmma_ws and the balanced tail in gemv,
// warps_n meant wgmma_ws's K groups), to one object per mainloop (generator/qkv_family.h config_to_json), and their
// variant names to the names of the new fields. A frozen copy of both forms: it never changes with the family's code.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace SQLite {
class Database;
}

namespace kt {
namespace db {

/// The schema-2 config JSON of a schema-1 qkv_proj config. Throws std::invalid_argument naming the field when `old` is
/// not a schema-1 qkv_proj config.
nlohmann::json qkv_config_v1_to_v2(const nlohmann::json& old);
/// The schema-2 variant name of a schema-1 qkv_proj variant name ("qkv_proj__<class>__<config>__<arch>"). Throws
/// std::invalid_argument when the config part is not of a schema-1 form.
std::string qkv_variant_v1_to_v2(const std::string& old);
/// Rewrites every qkv_proj row of `db` (measurements: config_json and variant_name; binaries: variant_name). Runs
/// inside the caller's transaction; throws std::runtime_error naming the row it cannot convert.
void migrate_qkv_configs_v1_to_v2(SQLite::Database& db);

}  // namespace db
}  // namespace kt
