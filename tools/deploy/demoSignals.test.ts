// A terminal's Ctrl-C goes to its whole foreground process group. The control plane's processes
// must not be in it: the demo stops them itself, after `pulumi destroy`, which needs the API
// server and the controller-manager alive (found by hand: without this, destroy timed out).
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ProcessGroup } from "../control-plane/processes.ts";

const dir = mkdtempSync(join(tmpdir(), "sbx-pg-test-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The process group id, field 5 of /proc/<pid>/stat (after the parenthesised name). */
const pgrp = (pid: number) => Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ")[2]);

describe("the control plane's processes and the terminal's Ctrl-C", () => {
  it("run in a process group of their own, and stopAll still stops them", async () => {
    const group = new ProcessGroup(dir, join(dir, "pids"));
    const s = group.start("sleeper", "sleep", ["300"]);
    expect(pgrp(s.pid)).toBe(s.pid);
    expect(pgrp(s.pid)).not.toBe(pgrp(process.pid));
    await group.stopAll(2_000);
    expect(await s.exited).toBe(-1); // ended by our SIGTERM
  });
});
