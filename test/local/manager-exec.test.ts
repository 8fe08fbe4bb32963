// Exec input checked by the Manager itself, not only by the HTTP route: the CLI's direct
// Kubernetes mode calls Manager.exec with no route in front, so a NUL in argv must be a
// ValidationError naming the field there too, and audited like any refused exec. Driven on a
// real local sandbox, calling the Manager directly (no app.inject).
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { finished } from "node:stream/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ValidationError } from "../../runtime/core/errors.ts";
import { type LocalRuntime, startLocalRuntime } from "../support/local.ts";

let rt: LocalRuntime;
let id: string;
const work = mkdtempSync(join(tmpdir(), "sbx-manager-exec-"));
const auditPath = join(work, "audit.jsonl");

beforeAll(async () => {
  rt = await startLocalRuntime({ budget: { cpu: "200m", memory: "4Gi" }, audit: { path: auditPath } });
  id = (await rt.manager.create({ owner: "alice", profile: "base", size: "nano" })).id;
  await rt.manager.wait("alice", id, { timeoutMs: 60_000 });
}, 120_000);

afterAll(async () => {
  await rt?.close();
  rmSync(work, { recursive: true, force: true });
});

/** The audit entries recorded so far (the file is appended line by line). */
function auditEntries(): Array<Record<string, unknown>> {
  let text = "";
  try {
    text = readFileSync(auditPath, "utf8");
  } catch {
    return [];
  }
  return text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe("Manager.exec validates its input", () => {
  it("a NUL in argv through the Manager directly is a ValidationError naming command.1, and is audited", async () => {
    const err = await rt.manager.exec("alice", id, { command: ["echo", "a\u0000b"] }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).code).toBe("validation");
    expect((err as ValidationError).details).toMatchObject({ field: "command.1" });
    expect((err as Error).message).toContain("must not contain NUL bytes");

    // the audit store writes asynchronously: wait (generously) for the refused exec's entry
    let entry: Record<string, unknown> | undefined;
    for (const end = Date.now() + 30_000; !entry && Date.now() < end; await new Promise((r) => setTimeout(r, 20)))
      entry = auditEntries().find((e) => e.op === "exec" && e.outcome === "error");
    expect(entry).toMatchObject({ op: "exec", owner: "alice", sandbox: id, outcome: "error", error: "validation" });
  });

  // the one check of a request (the local backend has none of its own since the exec path was
  // made to validate once): what the backend used to refuse is refused here
  it.each([
    [{ command: [] }, "command: invalid value []"],
    [{ command: ["true"], timeoutMs: 0 }, "timeoutMs: invalid value 0: use a positive number of milliseconds"],
    [{ command: ["true"], cwd: "relative" }, 'cwd: invalid value "relative"'],
  ])("refuses %j before it reaches the backend", async (req, msg) => {
    await expect(rt.manager.exec("alice", id, req)).rejects.toThrow(msg);
  });

  it("the sandbox still runs a valid command afterwards", async () => {
    const session = await rt.manager.exec("alice", id, { command: ["echo", "ok"] });
    const out: Buffer[] = [];
    session.stdout.on("data", (c: Buffer) => out.push(c));
    session.stderr.resume();
    const [result] = await Promise.all([session.result, finished(session.stdout), finished(session.stderr)]);
    expect(result.exitCode).toBe(0);
    expect(Buffer.concat(out).toString()).toBe("ok\n");
  });
});
