// What a Kubernetes sandbox uses, read inside its pod over the command channel it already has
// (runtime/k8s/resourceReader.ts): the shell script that reads it and the parser of its answer.
// Pure. In a pod with its own cgroup namespace on cgroup v2 (containerd and CRI-O default), the
// script reads the container's cgroup (cpu.stat usage_usec, memory.current and memory.stat,
// pids.current); elsewhere (cgroup v1, or the test cluster's bubblewrap pods, which have no
// cgroup of their own) it sums /proc over the pod's pid namespace: CPU time with reaped
// children's, resident pages (shared pages counted once per process). /workspace is one statfs.
import type { ResourceReading } from "../core/types.ts";

/** POSIX sh only (busybox images too): no awk, no getconf; USER_HZ 100 and 4 KiB pages assumed on /proc. */
export const POD_RESOURCES_SCRIPT = [
  "cg=/sys/fs/cgroup",
  'if [ -f $cg/cgroup.controllers ] && [ "$(cat /proc/self/cgroup 2>/dev/null)" = "0::/" ]; then',
  "  echo src cgroup",
  "  sed -n 's/^usage_usec /cpu_usec /p' $cg/cpu.stat",
  '  echo "mem $(cat $cg/memory.current)"',
  "  sed -n -e 's/^file /cache /p' -e 's/^inactive_file /inactive /p' $cg/memory.stat",
  '  echo "pids $(cat $cg/pids.current)"',
  "else",
  "  t=0; r=0; n=0",
  "  for d in /proc/[0-9]*; do",
  "    read -r l < $d/stat 2>/dev/null || continue",
  // biome-ignore lint/suspicious/noTemplateCurlyInString: the shell's expansion (strip up to the name), not a template
  "    set -- ${l##*) }",
  // biome-ignore lint/suspicious/noTemplateCurlyInString: the shell's positional parameters 12-22, not a template
  "    t=$((t + ${12} + ${13} + ${14} + ${15})); r=$((r + ${22})); n=$((n + 1))",
  "  done",
  '  echo "src proc"; echo "cpu_usec $((t * 10000))"; echo "mem $((r * 4096))"; echo "pids $n"',
  "fi",
  "stat -f -c 'ws %b %f %S' /workspace 2>/dev/null || true",
].join("\n");

/** The figures in the script's output; a line it could not write is an absent figure. */
export function parsePodResources(text: string): Partial<ResourceReading> {
  const v = new Map<string, number[]>();
  for (const line of text.split("\n")) {
    const [k, ...rest] = line.trim().split(/\s+/);
    const nums = rest.map(Number);
    if (k && nums.length && nums.every(Number.isFinite)) v.set(k, nums);
  }
  const one = (k: string) => v.get(k)?.[0];
  const out: Partial<ResourceReading> = {};
  const cpu = one("cpu_usec");
  const mem = one("mem");
  if (cpu !== undefined) out.cpuUsageUsec = cpu;
  if (mem !== undefined) {
    out.memoryBytes = mem;
    const inactive = one("inactive");
    const cache = one("cache");
    if (cache !== undefined) out.memoryCacheBytes = cache;
    // from /proc the sum of resident pages is already what the processes hold
    out.memoryWorkingSetBytes = inactive === undefined ? mem : Math.max(0, mem - inactive);
  }
  const pids = one("pids");
  if (pids !== undefined) out.pids = pids;
  const ws = v.get("ws");
  if (ws && ws.length === 3) out.workspaceUsedBytes = (ws[0] - ws[1]) * ws[2];
  return out;
}
