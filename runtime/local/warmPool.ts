// Warm slots: sandboxes started ahead of demand for a (profile, size), handed out by claim().
// Refill runs in the background, one start at a time so it never competes with cold creates
// for more than one core.

export interface WarmTarget {
  profile: string;
  size: string;
  count: number;
}

export interface WarmPoolDeps<S> {
  /** starts a slot for (profile, size) and resolves when it is ready */
  startSlot(profile: string, size: string): Promise<S>;
  onError(err: Error, target: WarmTarget): void;
}

export class WarmPool<S> {
  private readonly ready = new Map<string, S[]>();
  private readonly starting = new Map<string, number>();
  private running = false;
  private closed = false;
  /** consecutive failures per target, to back off instead of retrying in a loop */
  private readonly failures = new Map<string, number>();

  constructor(
    private readonly targets: WarmTarget[],
    private readonly deps: WarmPoolDeps<S>,
  ) {}

  static keyOf(profile: string, size: string): string {
    return `${profile}\u0000${size}`;
  }

  /** Takes a ready slot, or undefined. Triggers a refill. */
  take(profile: string, size: string, usable: (s: S) => boolean): S | undefined {
    const list = this.ready.get(WarmPool.keyOf(profile, size)) ?? [];
    let slot = list.shift();
    while (slot !== undefined && !usable(slot)) slot = list.shift();
    this.refill();
    return slot;
  }

  /** Adds an already-running slot (adopted after a restart); false if the pool does not want it. */
  adopt(profile: string, size: string, slot: S): boolean {
    const key = WarmPool.keyOf(profile, size);
    const target = this.targets.find((t) => WarmPool.keyOf(t.profile, t.size) === key);
    const list = this.ready.get(key) ?? [];
    if (!target || list.length >= target.count) return false;
    list.push(slot);
    this.ready.set(key, list);
    return true;
  }

  remove(slot: S): void {
    for (const list of this.ready.values()) {
      const i = list.indexOf(slot);
      if (i >= 0) list.splice(i, 1);
    }
    this.refill();
  }

  all(): S[] {
    return [...this.ready.values()].flat();
  }

  refill(): void {
    if (this.running || this.closed) return;
    this.running = true;
    void this.loop().finally(() => (this.running = false));
  }

  close(): void {
    this.closed = true;
  }

  private async loop(): Promise<void> {
    for (;;) {
      if (this.closed) return;
      const target = this.targets.find((t) => {
        const key = WarmPool.keyOf(t.profile, t.size);
        return (this.ready.get(key)?.length ?? 0) + (this.starting.get(key) ?? 0) < t.count;
      });
      if (!target) return;
      const key = WarmPool.keyOf(target.profile, target.size);
      this.starting.set(key, (this.starting.get(key) ?? 0) + 1);
      try {
        const slot = await this.deps.startSlot(target.profile, target.size);
        this.failures.delete(key);
        const list = this.ready.get(key) ?? [];
        list.push(slot);
        this.ready.set(key, list);
      } catch (err) {
        const n = (this.failures.get(key) ?? 0) + 1;
        this.failures.set(key, n);
        this.deps.onError(err as Error, target);
        await new Promise((r) => setTimeout(r, Math.min(30_000, 250 * 2 ** n)).unref());
      } finally {
        this.starting.set(key, (this.starting.get(key) ?? 1) - 1);
      }
    }
  }
}
