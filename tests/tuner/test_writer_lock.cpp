// One autotune per tuning database (tuner/writer_lock.h): a second writer is refused with the owner named, and the
// lock goes with its holder.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

#include "tests/support.h"
#include "tuner/writer_lock.h"

namespace {}  // namespace

TEST_CASE("WriterLock: one holder per database; the autotune CLI refuses a second writer naming the first", "[tuner]") {
  kt_test::TempDir tmp("kt_writer_lock");
  const std::string db = (tmp.path / "t.db").string();
  std::string why;
  kt::WriterLock a, b;
  REQUIRE(a.acquire(db, &why));
  CHECK_FALSE(b.acquire(db, &why));  // flock is per open file description: a second open in this process is refused
  CHECK_THAT(why, Catch::Contains("another autotune (pid " + std::to_string(getpid())));
  CHECK_THAT(why, Catch::Contains("autotune merge"));
  // A second autotune on the same database stops before it compiles anything.
  const std::string shapes = (tmp.path / "s.json").string();
  std::ofstream(shapes) << R"({"model":"t","hidden_size":3584,"num_attention_heads":28,"num_key_value_heads":4,)"
                        << R"("head_dim":128,"qkv_bias":true,"dtypes":["bf16"],)"
                        << R"("workloads":{"attention_prefill":[{"batch":1,"seqlen":512,"causal":true}]}})";
  auto [rc, out] =
      kt_test::run_autotune("--arch sm_90 --shapes " + shapes + " --db " + db + " --compile-only --max-candidates 1");
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("another autotune"));
  CHECK_THAT(out, Catch::Contains(db));
  // Released: the next writer goes ahead.
  a.release();
  REQUIRE(b.acquire(db, &why));
  b.release();
  std::tie(rc, out) =
      kt_test::run_autotune("--arch sm_90 --shapes " + shapes + " --db " + db + " --compile-only --max-candidates 1");
  INFO(out);
  CHECK(rc == 0);
  // A directory where the lock file would go: refused with the reason.
  kt::WriterLock c;
  CHECK_FALSE(c.acquire((tmp.path / "no" / "such" / "dir.db").string(), &why));
  CHECK_THAT(why, Catch::Contains("cannot create the writer lock"));
}
