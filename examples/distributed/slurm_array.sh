#!/usr/bin/env bash
# Tune shapes/qwen7b.json on N GPU nodes with a Slurm job array, then merge the shards into one database.
#
#   sbatch --array=0-3 examples/distributed/slurm_array.sh          # 4 shards, one GPU each
#   sbatch --dependency=afterok:<array job id> --export=ALL,KT_MERGE=1 examples/distributed/slurm_array.sh
#
# Each array task tunes shard $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT into its own SQLite file on the shared
# results folder (one writer per file; the files are only read once every task has finished). The merge step reads
# them and writes the final database. Same binary, same shapes file and same --arch on every node: the shards are a
# partition of the (problem, candidate) pairs that the command enumerates (autotune --shard).
#SBATCH --job-name=kerntune-tune
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=16
#SBATCH --time=02:00:00
#SBATCH --output=kerntune-%A_%a.log
set -euo pipefail

AUTOTUNE=${AUTOTUNE:-autotune}                    # the kerntune autotune binary
SHAPES=${SHAPES:-shapes/qwen7b.json}
ARCH=${ARCH:-sm_90}
RESULTS=${RESULTS:-$PWD/tune-results}            # shared folder: shard files and the merged database
# The cubin cache is per node (node-local disk): a compile-only pass on CPU nodes can fill it beforehand, e.g.
#   autotune --arch sm_90 --shapes shapes/qwen7b.json --compile-only --shard i/N --cache-dir /nfs/kerntune-cubins
# and the GPU nodes then read that folder with --cache-dir (cubins are written atomically, never half).
CACHE_DIR=${CACHE_DIR:-${TMPDIR:-/tmp}/kerntune-cubins}

mkdir -p "$RESULTS"
if [ "${KT_MERGE:-0}" = 1 ]; then
  "$AUTOTUNE" merge "$RESULTS/qwen7b.db" "$RESULTS"/shard-*.db
  "$AUTOTUNE" show --db "$RESULTS/qwen7b.db" | tail -n 1
  exit 0
fi

: "${SLURM_ARRAY_TASK_ID:?run as a job array: sbatch --array=0-<N-1> $0}"
: "${SLURM_ARRAY_TASK_COUNT:?run as a job array: sbatch --array=0-<N-1> $0}"
i=$SLURM_ARRAY_TASK_ID
n=$SLURM_ARRAY_TASK_COUNT
# The shard's database lives on node-local disk while it is written (SQLite over a network file system loses
# writes: its locks are not reliable there) and is copied to the shared folder when the shard is done.
local_db=${TMPDIR:-/tmp}/kerntune-shard-$i.db
"$AUTOTUNE" --arch "$ARCH" --shapes "$SHAPES" --shard "$i/$n" --db "$local_db" --cache-dir "$CACHE_DIR"
cp "$local_db" "$RESULTS/shard-$i.db.part" && mv "$RESULTS/shard-$i.db.part" "$RESULTS/shard-$i.db"
