// Human-readable logs on a terminal, JSON elsewhere. The terminal is not needed to test it:
// the TTY decision is its own function, and the logger writes to a destination we hand it.
import { describe, expect, it } from "vitest";
import { createLogger, shouldPrettyPrint } from "./log.ts";
import { formatLogLine } from "./logFormat.ts";

/** A pino destination that keeps what it is given. */
function capture() {
  const lines: string[] = [];
  return { lines, destination: { write: (s: string) => void lines.push(s) } };
}

describe("createLogger", () => {
  it("pretty: one readable line per record, with the bindings as key=value", () => {
    const c = capture();
    const log = createLogger({ pretty: true, destination: c.destination });
    log.child({ sandbox: "s1" }).info({ owner: "alice", op: "create", ms: 412 }, "sandbox ready");
    expect(c.lines).toHaveLength(1);
    expect(c.lines[0]).toMatch(
      /^\d\d:\d\d:\d\d\.\d{3} INFO {2}sbx: sandbox ready {2}sandbox=s1 owner=alice op=create ms=412\n$/,
    );
  });

  it("not pretty: the JSON pino writes, one object per line", () => {
    const c = capture();
    createLogger({ pretty: false, destination: c.destination }).warn({ sandbox: "s1" }, "slow");
    expect(JSON.parse(c.lines[0])).toMatchObject({ level: 40, name: "sbx", sandbox: "s1", msg: "slow" });
  });

  it("an error shows its message inline and, at warn and above, its stack below", () => {
    const c = capture();
    createLogger({ pretty: true, destination: c.destination }).error(
      { sandbox: "s2", err: new Error("disk full") },
      "record write failed",
    );
    const [first, ...stack] = c.lines[0].trimEnd().split("\n");
    expect(first).toMatch(/ERROR sbx: record write failed {2}sandbox=s2 err="disk full"$/);
    expect(stack.length).toBeGreaterThan(0);
    expect(stack[0]).toMatch(/^ {4}at /);
  });

  it("honours the level", () => {
    const c = capture();
    const log = createLogger({ pretty: true, level: "warn", destination: c.destination });
    log.info("hidden");
    log.warn("shown");
    expect(c.lines.map((l) => l.includes("shown"))).toEqual([true]);
  });
});

describe("shouldPrettyPrint", () => {
  it.each([
    [{ isTTY: true }, true],
    [{ isTTY: false }, false],
    [{}, false],
  ])("%j -> %s", (stream, want) => {
    expect(shouldPrettyPrint(stream)).toBe(want);
  });
});

describe("formatLogLine", () => {
  const t = Date.UTC(2026, 11, 1, 9, 41, 2, 123);
  it.each([
    ["plain message", { level: 30, time: t, name: "sbx", msg: "listening" }, "09:41:02.123 INFO  sbx: listening\n"],
    [
      "quotes values with spaces",
      { level: 20, time: t, msg: "m", path: "/a b" },
      '09:41:02.123 DEBUG m  path="/a b"\n',
    ],
    [
      "objects as JSON",
      { level: 30, time: t, msg: "m", listen: { port: 8080 } },
      '09:41:02.123 INFO  m  listen={"port":8080}\n',
    ],
    ["hides pid and hostname", { level: 50, time: t, msg: "m", pid: 1, hostname: "h" }, "09:41:02.123 ERROR m\n"],
    ["an unknown level by number", { level: 35, time: t, msg: "m" }, "09:41:02.123 L35   m\n"],
  ])("%s", (_name, rec, want) => {
    expect(formatLogLine(`${JSON.stringify(rec)}\n`)).toBe(want);
  });

  it.each([["not json"], ['{"no":"level"}']])("passes through what is not a pino line: %s", (line) => {
    expect(formatLogLine(line)).toBe(`${line}\n`);
  });
});
