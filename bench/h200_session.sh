#!/usr/bin/env bash
# The H200 measurements this project records, in phases that each fit one 10-minute call.
# Binaries are built on the development machine and carried (BIN), with the shared libraries the
# GPU machine lacks (LIBS; bench/bundle_binaries.sh packs both); or build there with
# -DSHIFTSTACK_DEPS_DIR=.deps and point BIN at it.
#   PHASE=1: GPU tests, then `shiftstack bench` for every GPU engine x encoding on ci, kbmod, dense
#   PHASE=2: sensitivity validation of the GPU engines, then the `deep` pipeline from FITS files
#   PHASE=3: fractional shifts: `bench --shifts fractional` for the engines that compute them, and
#            the fractional study (null variance at PSF sigma 0.55, 0.65, 0.85) through each of them
#   PHASE=4: fractional-shift validation of those engines (PAIRS near masks with the standard kit,
#            AWAY_PAIRS with sparse masks and away-placed windows); reports tarred into $OUT
#   PHASE=5: one lease's check of the GPU engines: the whole GPU test suite, compute-sanitizer
#            racecheck and memcheck on the Fourier route's and the gathers' small-stack tests
#            and on every cuda-fast bilinear shape,
#            `bench` of every GPU engine x encoding on ci, kbmod, dense (with the Fourier-route
#            stage times in the JSON), `bench --top-k 8` on kbmod (KBMOD's results_per_pixel,
#            lists downloaded), and fractional shifts on dense (cuda-fast, cuda-fourier, cuda-tc)
#   PHASE=6: cuda-tc's row kernels: `bench` of dense and kbmod (fp16, two rounds) with each row kernel
#            forced (SHIFTSTACK_TC_KERNEL=mma, wgmma) and by default, or with the settings KERNELS
#            names ("default" for none), for BIN and, when BASE names a second binary folder, for
#            it in the same rounds (a setting a build lacks is refused there, in its log); then the
#            GPU suite, compute-sanitizer memcheck and racecheck on GpuFourier.RowRoute*, and, with
#            COMMIT set, records of cuda-tc on dense, kbmod and ci (every encoding); reports tarred
#            into $OUT
#   PHASE=7: the records of cuda-tc on any card, with that card's own ceilings: the instruction and
#            cuBLAS GEMM ceilings (shiftstack_tensor_ceiling, before and after), records of cuda-tc
#            on dense, kbmod and ci (every encoding, baseline cuda-serial, commit COMMIT), and two
#            rounds of dense fp16 `--runs 7`; reports tarred into $OUT
# Logs and JSON land in $OUT.
set -u
out=${OUT:-h200-out}
bin=${BIN:-build/bin}
mkdir -p "$out"
export LD_LIBRARY_PATH=${LIBS:+$(realpath "$LIBS"):}${LD_LIBRARY_PATH:-}
# The steps end within DEADLINE seconds (the call's limit, less a margin).
end=$(( $(date +%s) + ${DEADLINE:-540} ))
source "$(dirname "$0")/gpu_steps.sh"
gpu_engines=(cuda-serial cuda-tiled cuda-fast cuda-fourier cuda-gemm cuda-tc)
fractional_engines=(cuda-serial cuda-tiled cuda-fast cuda-fourier)  # the FP16 Fourier engines refuse them

# Records of cuda-tc at $COMMIT (every encoding, --runs 5) on dense, kbmod and ci, with the further
# bench options given.
cuda_tc_records() {  # [bench options...]
  local workload
  for workload in dense kbmod ci; do
    step "records: cuda-tc $workload at $COMMIT"
    SHIFTSTACK_COMMIT=$COMMIT timeout "$(within 60)" "$bin/shiftstack" bench --workload "$workload" --engine cuda-tc \
      --encoding all --runs 5 "$@" --json "$out/records_$workload.json" > "$out/records_$workload.txt" 2>&1
    echo "exit $?" | tee -a "$out/records_$workload.txt" "$out/summary.txt"
    grep -v "^ *$" "$out/records_$workload.txt" | tail -8 | tee -a "$out/summary.txt"
  done
}

PHASE=${PHASE:-1}
if [ "$PHASE" = 1 ]; then
  machine
  step "gpu tests"
  gpu_suite gpu_tests 150
  for workload in ci kbmod dense; do
    step "bench $workload"
    timeout 170 "$bin/shiftstack" bench --workload "$workload" --engine "${gpu_engines[@]}" \
      --encoding all --runs 5 --baseline cuda-serial --json "$out/bench_$workload.json" \
      > "$out/bench_$workload.txt" 2>&1
    echo "exit $?" >> "$out/bench_$workload.txt"
    tail -22 "$out/bench_$workload.txt" | tee -a "$out/summary.txt"
  done
elif [ "$PHASE" = 5 ]; then
  machine
  step "gpu tests"
  gpu_suite gpu_tests 200
  sanitize 'GpuFourier.FractionalShifts*:GpuFourier.ExactGatherOfEveryTrial:GpuFourier.TinyStackAllEnginesWithTopK:GpuFourier.EveryTensorCoreKernelMatchesReference:GpuFourier.TensorCoreFractionalTinyStack:GpuGatherSanitizer.*:GpuGather.EveryFastBilinearVariantMatchesReference' \
    150 racecheck memcheck
  for workload in dense kbmod ci; do
    step "bench $workload"
    timeout "$(within 120)" "$bin/shiftstack" bench --workload "$workload" --engine "${gpu_engines[@]}" \
      --encoding all --runs 5 --baseline cuda-serial --json "$out/bench_$workload.json" \
      > "$out/bench_$workload.txt" 2>&1
    echo "exit $?" >> "$out/bench_$workload.txt"
    grep -v "stages (ms)" "$out/bench_$workload.txt" | tail -20 | tee -a "$out/summary.txt"
    grep "stages (ms)" "$out/bench_$workload.txt" | tee -a "$out/summary.txt"
    if [ "$workload" = kbmod ]; then
      step "bench kbmod --top-k 8"
      timeout "$(within 100)" "$bin/shiftstack" bench --workload kbmod --engine "${gpu_engines[@]:1}" \
        --encoding fp32 fp16 --runs 5 --top-k 8 --baseline cuda-serial --json "$out/bench_kbmod_top8.json" \
        > "$out/bench_kbmod_top8.txt" 2>&1
      echo "exit $?" >> "$out/bench_kbmod_top8.txt"
      grep -v "stages (ms)" "$out/bench_kbmod_top8.txt" | tail -12 | tee -a "$out/summary.txt"
    fi
  done
  step "bench dense, fractional shifts (cuda-fast's bilinear kernel, cuda-fourier, cuda-tc)"
  timeout "$(within 90)" "$bin/shiftstack" bench --workload dense --shifts fractional \
    --engine cuda-fast cuda-fourier cuda-tc --encoding fp32 fp16 --runs 3 --baseline cuda-serial \
    --json "$out/bench_dense_fractional.json" > "$out/bench_dense_fractional.txt" 2>&1
  echo "exit $?" >> "$out/bench_dense_fractional.txt"
  tail -8 "$out/bench_dense_fractional.txt" | tee -a "$out/summary.txt"
  archive phase5
elif [ "$PHASE" = 6 ]; then
  machine
  folders=("$bin")
  [ -n "${BASE:-}" ] && folders+=("$BASE")
  for round in 1 2; do
    for workload in dense kbmod; do
      for folder in "${folders[@]}"; do
        for kernel in ${KERNELS:-default mma wgmma}; do
          tag="${workload}_$(basename "$folder")_${kernel}_$round"
          step "bench $tag"
          if [ "$kernel" = default ]; then kernel_env=(env -u SHIFTSTACK_TC_KERNEL); else
            kernel_env=(env SHIFTSTACK_TC_KERNEL="$kernel"); fi
          "${kernel_env[@]}" timeout "$(within 60)" "$folder/shiftstack" bench --workload "$workload" --engine cuda-tc \
            --encoding fp16 --runs 7 --baseline none --json "$out/ab_$tag.json" > "$out/ab_$tag.txt" 2>&1
          echo "exit $?" >> "$out/ab_$tag.txt"
          grep "stages (ms)" "$out/ab_$tag.txt" | tee -a "$out/summary.txt"
        done
      done
    done
  done
  step "gpu tests"
  gpu_suite gpu_tests 200
  sanitize 'GpuFourier.RowRoute*' 120 memcheck racecheck
  [ -n "${COMMIT:-}" ] && cuda_tc_records
  archive phase6
elif [ "$PHASE" = 7 ]; then
  : "${COMMIT:?set COMMIT to the commit of the binaries}"
  ceilings() {  # NAME
    step "ceilings ($1)"
    timeout "$(within 40)" "$bin/shiftstack_tensor_ceiling" 20000 > "$out/$1.txt" 2>&1
    echo "exit $?" >> "$out/$1.txt"
    tee -a "$out/summary.txt" < "$out/$1.txt"
  }
  machine power.limit
  ceilings ceilings_before
  step "warm-up"
  timeout "$(within 40)" "$bin/shiftstack" bench --workload dense --engine cuda-tc --encoding fp16 --runs 3 \
    --baseline none > "$out/warmup.txt" 2>&1
  cuda_tc_records --baseline cuda-serial
  for round in 1 2; do
    step "dense fp16 round $round"
    SHIFTSTACK_COMMIT=$COMMIT timeout "$(within 40)" "$bin/shiftstack" bench --workload dense --engine cuda-tc \
      --encoding fp16 --runs 7 --baseline none --json "$out/round_$round.json" > "$out/round_$round.txt" 2>&1
    echo "exit $?" | tee -a "$out/round_$round.txt" "$out/summary.txt"
    grep "stages (ms)" "$out/round_$round.txt" | tee -a "$out/summary.txt"
  done
  ceilings ceilings_after
  archive phase7
elif [ "$PHASE" = 3 ]; then
  machine
  for workload in ${WORKLOADS:-ci kbmod dense}; do
    step "bench $workload, fractional shifts"
    # The FP64 serial gather is the baseline (it picks exactly the reference's corners).
    timeout 200 "$bin/shiftstack" bench --workload "$workload" --shifts fractional --engine "${fractional_engines[@]:1}" \
      --encoding all --runs 3 --baseline cuda-serial --json "$out/bench_${workload}_fractional.json" \
      > "$out/bench_${workload}_fractional.txt" 2>&1
    echo "exit $?" >> "$out/bench_${workload}_fractional.txt"
    tail -14 "$out/bench_${workload}_fractional.txt" | tee -a "$out/summary.txt"
  done
  for engine in "${fractional_engines[@]}"; do
    step "fractional study through $engine"
    # The cubes of the committed CPU study (bench/validation/fractional/: seed 1000).
    timeout 120 "$bin/shiftstack" validate --fractional-study --engine "$engine" --width 64 --height 64 \
      --exposures 16 --velocities 9 --cubes 24 --seed 1000 ${COMMIT:+--commit "$COMMIT"} \
      --out "$out/fractional-study/$engine" \
      > "$out/fractional_study_$engine.txt" 2>&1
    echo "exit $?" >> "$out/fractional_study_$engine.txt"
    tail -8 "$out/fractional_study_$engine.txt" | tee -a "$out/summary.txt"
  done
  (cd "$out" && tar czf fractional-study.tgz fractional-study && rm -rf fractional-study)
elif [ "$PHASE" = 4 ]; then
  engines=$(IFS=,; echo "${fractional_engines[*]}")
  step "fractional validation near masks (${PAIRS:-512} pairs)"
  BUILD=$(dirname "$bin") PAIRS=${PAIRS:-512} ENGINES=$engines EXTRA="--shift-mode fractional" TAG=fractional \
    OUT="$out/validation" DEADLINE=${DEADLINE:-270} timeout 300 bash bench/validation/run_gpu.sh \
    > "$out/validation_fractional.log" 2>&1
  echo "exit $?" | tee -a "$out/validation_fractional.log" "$out/summary.txt"
  grep -E "took|stopping" "$out/validation_fractional.log" | tail -3 | tee -a "$out/summary.txt"
  step "fractional validation away from masks (${AWAY_PAIRS:-256} pairs)"
  BUILD=$(dirname "$bin") PAIRS=${AWAY_PAIRS:-256} ENGINES=$engines TAG=sparse-fractional KIT_MASKS=sparse \
    PLACEMENT=away EXTRA="--shift-mode fractional --no-completeness" OUT="$out/sparse-masks-fractional" \
    DEADLINE=${DEADLINE:-270} timeout 300 bash bench/validation/run_gpu.sh > "$out/validation_sparse_fractional.log" 2>&1
  echo "exit $?" | tee -a "$out/validation_sparse_fractional.log" "$out/summary.txt"
  grep -E "took|stopping" "$out/validation_sparse_fractional.log" | tail -3 | tee -a "$out/summary.txt"
  (cd "$out" && tar czf validation_fractional.tgz validation sparse-masks-fractional && rm -rf validation sparse-masks-fractional)
else
  step "validation (GPU engines, ${PAIRS:-128} pairs)"
  BUILD=$(dirname "$bin") PAIRS=${PAIRS:-128} OUT="$out/validation" timeout 240 \
    bash bench/validation/run_gpu.sh > "$out/validation.log" 2>&1
  echo "exit $?" | tee -a "$out/validation.log" "$out/summary.txt"
  tail -30 "$out/validation.log" | tee -a "$out/summary.txt"
  (cd "$out" && tar czf validation.tgz validation && rm -rf validation)
  step "deep pipeline"
  timeout 280 bash bench/deep_pipeline.sh "$(dirname "$bin")" /tmp/deep 1 > "$out/deep.log" 2>&1
  echo "exit $?" | tee -a "$out/deep.log" "$out/summary.txt"
  tail -25 "$out/deep.log" | tee -a "$out/summary.txt"
fi
