import { describe, expect, it } from "vitest";
import { boundAuditEntry } from "./audit.ts";
import { describeValue, detailValue } from "./errors.ts";
import { EXEC_LIMITS, type ExecInput, validateExecInput } from "./execInput.ts";

const bytesOf = (argv: string[]) => argv.reduce((n, a) => n + Buffer.byteLength(a) + 1, 0);

describe("validateExecInput", () => {
  const max = "a".repeat(EXEC_LIMITS.argStringBytes);
  it.each<[string, ExecInput, string]>([
    ["empty argv", { command: [] }, "command: invalid value []: give the command"],
    ["a number in argv", { command: ["echo", 5] }, "command.1: invalid value 5: every argument must be a string"],
    [
      "NUL in argv",
      { command: ["echo", "a\u0000b"] },
      'command.1: invalid value "a\\u0000b": must not contain NUL bytes',
    ],
    ["NUL in an env value", { command: ["true"], env: { A: "\u0000" } }, "env.A: invalid value"],
    [
      "'=' in an env key",
      { command: ["true"], env: { "A=B": "x" } },
      'env.A=B: invalid value "A=B": environment variable names',
    ],
    ["an empty env key", { command: ["true"], env: { "": "x" } }, 'env: invalid value "": environment variable names'],
    ["NUL in cwd", { command: ["true"], cwd: "/tmp\u0000" }, 'cwd: invalid value "/tmp\\u0000": must not contain NUL'],
    ["a relative cwd", { command: ["true"], cwd: "tmp" }, 'cwd: invalid value "tmp": use an absolute path'],
    ["a zero timeout", { command: ["true"], timeoutMs: 0 }, "timeoutMs: invalid value 0: use a positive number"],
    ["a NaN timeout", { command: ["true"], timeoutMs: Number.NaN }, "timeoutMs: invalid value"],
    [
      "one byte over MAX_ARG_STRLEN",
      { command: ["echo", `${max}a`] },
      'command.1: invalid value "131072 bytes": the argument is longer than the kernel\'s per-string limit of 131071 bytes (MAX_ARG_STRLEN)',
    ],
    [
      "multi-byte characters over it",
      { command: ["echo", "é".repeat(65_536)] },
      'command.1: invalid value "131072 bytes"',
    ],
    [
      "NAME=value over it",
      { command: ["true"], env: { K: "v".repeat(EXEC_LIMITS.argStringBytes - 1) } },
      'env.K: invalid value "131072 bytes": the variable (NAME=value)',
    ],
    [
      "argv over the total",
      { command: ["echo", max, max] },
      `command: invalid value "${5 + 2 * (EXEC_LIMITS.argStringBytes + 1)} bytes of argv and env": argv plus env may be at most ${EXEC_LIMITS.totalBytes} bytes`,
    ],
    [
      "too many arguments",
      { command: Array.from({ length: EXEC_LIMITS.args + 1 }, () => "x") },
      `use at most ${EXEC_LIMITS.args} arguments`,
    ],
  ])("refuses %s", (_name, input, message) => {
    expect(() => validateExecInput(input)).toThrow(message);
  });

  it("accepts exactly the limits: one string of MAX_ARG_STRLEN - 1 bytes and argv + env of the total", () => {
    expect(() => validateExecInput({ command: ["echo", max] })).not.toThrow();
    const head = ["echo", max];
    const rest = "b".repeat(EXEC_LIMITS.totalBytes - bytesOf(head) - 1);
    expect(() => validateExecInput({ command: [...head, rest] })).not.toThrow();
    expect(() => validateExecInput({ command: [...head, `${rest}b`] })).toThrow(
      `at most ${EXEC_LIMITS.totalBytes} bytes`,
    );
  });
});

describe("bounded renderings", () => {
  it("describeValue cuts long values with their full length and survives values JSON cannot render", () => {
    expect(describeValue("x".repeat(500))).toBe(`"${"x".repeat(119)}...(502 characters in all)`);
    let deep: unknown = 1;
    for (let i = 0; i < 200_000; i++) deep = [deep];
    expect(describeValue(deep)).toBe("(a value of type object that cannot be shown)");
    expect(detailValue(deep)).toBe("(a value of type object that cannot be shown)");
    expect(describeValue(10n)).toBe("(a value of type bigint that cannot be shown)");
  });

  it("boundAuditEntry keeps small details as they are and cuts big ones with a marker", () => {
    const small = {
      time: "t",
      op: "exec" as const,
      owner: "o",
      outcome: "ok" as const,
      details: { command: ["echo", "hi"] },
    };
    expect(boundAuditEntry(small)).toEqual(small);
    const big = boundAuditEntry({
      ...small,
      details: { command: ["x".repeat(1000), ...Array.from({ length: 40 }, () => "a")] },
      message: "m".repeat(5000),
    });
    const command = big.details!.command as string[];
    expect(command[0]).toBe(`${"x".repeat(256)}...[truncated: 1000 characters in all]`);
    expect(command).toHaveLength(33);
    expect(command[32]).toBe("...[truncated: 41 items in all]");
    expect(big.message).toHaveLength(2048 + "...[truncated: 5000 characters in all]".length);
  });
});
