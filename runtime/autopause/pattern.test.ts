// The tenant's pattern runs on RE2: linear time, whatever the pattern and the probe printed.
import { describe, expect, it } from "vitest";
import { ValidationError } from "../core/errors.ts";
import { compileTenantPattern, LinearRegExp, PATTERN_LIMITS } from "./pattern.ts";
import { MAX_MESSAGE_CHARS } from "./probe.ts";

const F = "autoPause.pause.whenProbedIdle.messageRegex";

describe("compileTenantPattern", () => {
  it("^(a+)+$ against 30 a's and '!' answers at once (JavaScript's engine: 1-7 s for 27 a's, doubling with each more)", () => {
    const re = compileTenantPattern(F, "^(a+)+$");
    const started = performance.now();
    expect(re.test(`${"a".repeat(30)}!`)).toBe(false);
    // generous: RE2 needs about a millisecond here, backtracking needs seconds even on an idle machine
    expect(performance.now() - started).toBeLessThan(2000);
    expect(re.test("aaaa")).toBe(true);
  });

  it("is a RegExp that prints and compares as the tenant wrote it", () => {
    const re = compileTenantPattern(F, "^in(active)$");
    expect(re).toBeInstanceOf(RegExp);
    expect(re).toBeInstanceOf(LinearRegExp);
    expect(re.source).toBe("^in(active)$");
    expect(re.flags).toBe("");
    expect(String(re)).toBe("/^in(active)$/");
    expect(re).toEqual(/^in(active)$/);
    const m = re.exec("inactive")!;
    expect([m[0], m[1], m.index]).toEqual(["inactive", "active", 0]);
    expect("inactive".replace(re, "idle")).toBe("idle");
    expect("xinactive".search(compileTenantPattern(F, "inactive"))).toBe(1);
    expect(() => "a,b".split(compileTenantPattern(F, ","))).toThrow(/split is not supported/);
  });

  it("never hands the tenant's pattern to JavaScript's engine: RE2-only syntax works, JavaScript-only syntax is refused", () => {
    expect(compileTenantPattern(F, "(?i)^IDLE\\z").test("idle")).toBe(true);
    expect(compileTenantPattern(F, "^[[:digit:]]+$").test("42")).toBe(true);
    expect(() => compileTenantPattern(F, "(?<=a)b")).toThrow(ValidationError);
    expect(() => compileTenantPattern(F, "\\k<x>")).toThrow(/RE2 says: invalid escape sequence/);
  });

  it("sees at most the first PATTERN_LIMITS.input characters, as many as a probe message holds", () => {
    expect(MAX_MESSAGE_CHARS).toBe(PATTERN_LIMITS.input);
    const re = compileTenantPattern(F, "b");
    expect(re.test(`${"a".repeat(PATTERN_LIMITS.input - 1)}b`)).toBe(true);
    expect(re.test(`${"a".repeat(PATTERN_LIMITS.input)}b`)).toBe(false);
  });

  it("remembers results, and compiles each pattern once", () => {
    const a = compileTenantPattern(F, "^idle$");
    expect(compileTenantPattern(F, "^idle$")).toBe(a);
    for (let i = 0; i < 200; i++) expect(a.test(i % 2 ? "idle" : `busy ${i}`)).toBe(i % 2 === 1);
  });

  it.each<[string, unknown, string]>([
    [
      "not a string",
      ["^idle$"],
      `${F}: invalid value ["^idle$"]: use a non-empty JavaScript regular expression limited to RE2 syntax`,
    ],
    ["a backreference", "(a)\\1", "RE2 says: invalid escape sequence: `\\1`"],
    [
      "too long",
      "x".repeat(PATTERN_LIMITS.chars + 1),
      `at most ${PATTERN_LIMITS.chars} characters (this one has ${PATTERN_LIMITS.chars + 1})`,
    ],
    ["too costly", "(.*a){100}", `instructions, over the limit of ${PATTERN_LIMITS.program}`],
  ])("refuses %s", (_n, value, message) => {
    expect(() => compileTenantPattern(F, value)).toThrow(ValidationError);
    expect(() => compileTenantPattern(F, value)).toThrow(message);
  });
});
