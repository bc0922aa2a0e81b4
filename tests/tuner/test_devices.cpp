// autotune --devices (tuner/cli_checks.h parse_devices / first_device): the accepted forms, the refusals naming the
// option, and the CLI refusing it where nothing is measured.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tests/support.h"
#include "tuner/cli_checks.h"

using namespace kt;

TEST_CASE("--devices: all, ordinal lists, and refusals naming the option", "[tuner][cli]") {
  CHECK(cli::parse_devices("", 4) == std::vector<int>{0});
  CHECK(cli::parse_devices("all", 1) == std::vector<int>{0});
  CHECK(cli::parse_devices("all", 3) == std::vector<int>{0, 1, 2});
  CHECK(cli::parse_devices("2,0", 4) == std::vector<int>{2, 0});
  CHECK(cli::parse_devices("1", 2) == std::vector<int>{1});
  const std::vector<std::pair<std::string, std::string>> bad = {{"2", "GPU 2 does not exist: this machine has 2"},
                                                                {"0,0", "GPU 0 is named twice"},
                                                                {"0,", "'' is not a GPU ordinal"},
                                                                {"a", "'a' is not a GPU ordinal"},
                                                                {"-1", "'-1' is not a GPU ordinal"},
                                                                {"0 ,1", "'0 ' is not a GPU ordinal"},
                                                                {"ALL", "'ALL' is not a GPU ordinal"}};
  for (const auto& [text, why] : bad) {
    INFO(text);
    try {
      cli::parse_devices(text, 2);
      FAIL("accepted");
    } catch (const cli::CliError& e) {
      CHECK_THAT(e.what(), Catch::Contains("--devices '" + text + "'") && Catch::Contains(why));
    }
  }
  CHECK(cli::first_device("") == 0);
  CHECK(cli::first_device("all") == 0);
  CHECK(cli::first_device("3,1") == 3);
  CHECK(cli::first_device("x") == 0);  // refused later by parse_devices
}

TEST_CASE("autotune refuses --devices with --compile-only and a malformed list, before any work", "[tuner][cli]") {
  kt_test::TempDir t;
  auto [rc, out] = kt_test::run_autotune("--arch sm_90a --compile-only --devices all --shapes " +
                                         std::string(KT_SOURCE_DIR) + "/shapes/qwen7b.json");
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("--devices has no effect with --compile-only"));
  std::tie(rc, out) = kt_test::run_autotune("--arch sm_90a --devices 0,0 --shapes " + std::string(KT_SOURCE_DIR) +
                                            "/shapes/qwen7b.json --db " + (t.path / "d.db").string());
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("--devices '0,0'") && Catch::Contains("named twice"));
}
