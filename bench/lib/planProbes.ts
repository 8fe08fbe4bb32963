// The open-loop schedule of probe creates under load: one every `intervalMs` for `windowMs`,
// spread round-robin over `replicas`, each at a fixed offset from the window's start. Open
// loop on purpose: a probe that waits for the previous answer would slow down exactly when the
// service does and hide the latency it is there to measure (coordinated omission).

export interface PlannedProbe {
  /** ms after the window's start */
  atMs: number;
  /** index of the replica to send it to */
  replica: number;
}

export function planProbes(windowMs: number, intervalMs: number, replicas: number): PlannedProbe[] {
  if (!(intervalMs > 0)) throw new RangeError(`planProbes: intervalMs must be > 0, got ${intervalMs}`);
  if (!(Number.isInteger(replicas) && replicas > 0))
    throw new RangeError(`planProbes: replicas must be a positive integer, got ${replicas}`);
  const n = Math.max(0, Math.floor(windowMs / intervalMs));
  return Array.from({ length: n }, (_, i) => ({ atMs: i * intervalMs, replica: i % replicas }));
}
