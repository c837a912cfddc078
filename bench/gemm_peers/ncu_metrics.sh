# Sourced by run_ncu.sh and l2_probe.sh: raw ncu counters for where a GEMM's bytes come from and go
# (the SM's loads and TMA, the other L2 partition through the fabric, DRAM), for comparing kernels
# that move the same operands.
#   ncu_metrics FILE NCU_ARGS... -- COMMAND...     (needs $NCU; appends "ncu.err" beside FILE)
L2_METRICS=lts__t_sectors.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_atom.sum
L2_METRICS+=,lts__t_sectors_op_red.sum,lts__t_sectors_lookup_hit.sum,lts__t_sectors_lookup_miss.sum
L2_METRICS+=,lts__t_sectors_srcunit_tex.sum,lts__t_sectors_srcunit_ltcfabric.sum,lts__t_sectors_srcunit_tex_lookup_hit.sum
L2_METRICS+=,lts__t_requests_srcunit_tex.sum,l1tex__m_xbar2l1tex_read_bytes.sum
L2_METRICS+=,dram__bytes_read.sum,dram__bytes_write.sum,sm__cycles_active.avg,gpc__cycles_elapsed.max

ncu_metrics() {
  local file=$1; shift
  local args=()
  while [ "$1" != "--" ]; do args+=("$1"); shift; done
  shift
  local err; err="$(dirname "$file")/ncu.err"
  # An unknown name fails the whole list, so fall back to one metric at a time.
  if ! "$NCU" --clock-control none "${args[@]}" --metrics "$L2_METRICS" --csv "$@" > "$file" 2>> "$err"; then
    : > "$file"
    local m
    for m in ${L2_METRICS//,/ }; do
      "$NCU" --clock-control none "${args[@]}" --metrics "$m" --csv "$@" 2>> "$err" \
        | grep -E '^"[0-9]' >> "$file" || echo "metric $m: not collected"
    done
  fi
  echo "ncu metrics: $(grep -c . "$file") lines in $file"
}
