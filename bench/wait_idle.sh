# Sourced by bench scripts: wait_idle NAME LOAD SECONDS waits up to SECONDS (checking every 10 s)
# while the 1-minute load average is >= LOAD, saying so once under NAME; then returns 0 either way
# (the caller records the load it starts at).
wait_idle() {
  local me=$1 limit=$2 max=$3 waited=0
  while awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v m="$limit" 'BEGIN { exit !(l >= m) }' && [ "$waited" -lt "$max" ]; do
    [ "$waited" = 0 ] && echo "$me: load $(cut -d' ' -f1 /proc/loadavg) >= $limit: waiting up to ${max}s for the machine to go idle"
    sleep 10; waited=$((waited + 10))
  done
  return 0
}
