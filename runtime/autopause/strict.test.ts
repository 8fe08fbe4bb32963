// The autoPause parser is strict and total: every malformed document is a ValidationError (a 400)
// naming the exact field path, a short preview of the bad value and the fix; nothing else is
// ever thrown, whatever JSON comes in.
// Over 400 lines on purpose: one table row per field and bad shape of the document (63 rows), so a
// reader sees the parser's whole contract in one place.
// Over 400 lines on purpose: one table of malformed documents per field of the spec, and the
// tables share the generators at the top; split files would repeat them.
import { describe, expect, it } from "vitest";
import { ValidationError } from "../core/errors.ts";
import { validateAutoPause } from "./spec.ts";

const probe = { name: "Active", command: ["sh", "-c", "echo inactive"] };
const idle = (messageRegex: unknown) => ({
  probes: [probe],
  pause: { whenProbedIdle: { probe: "Active", messageRegex, thresholdDuration: 0 } },
});
const schedule = (s: unknown) => ({ probes: [probe], resume: { whenProbedSchedule: s } });

/** `levels` objects inside each other under `key`, built without recursion (JSON.parse of the same text makes the same value). */
function nested(levels: number, key: string, leaf: unknown = {}): unknown {
  let v = leaf;
  for (let i = 0; i < levels; i++) v = { [key]: v };
  return v;
}

function nestedArrays(levels: number): unknown {
  let v: unknown = [];
  for (let i = 0; i < levels; i++) v = [v];
  return v;
}

const UNKNOWN = "unknown field; ";
const RE2 = "limited to RE2 syntax (matched in linear time: backreferences and lookaround are not supported";

describe("validateAutoPause refuses malformed documents, naming the field, the value and the fix", () => {
  it.each<[string, unknown, string]>([
    // the shapes the hostile run hit with 500s
    ["probes as a string", { probes: "x" }, 'autoPause.probes: invalid value "x": use an array of probes'],
    ["probes as an object", { probes: {} }, "autoPause.probes: invalid value {}: use an array of probes"],
    ["probes as a number", { probes: 3 }, "autoPause.probes: invalid value 3: use an array of probes"],
    [
      "timeout null",
      { timeout: null },
      "autoPause.timeout: invalid value null: use an object with after, action; or leave autoPause.timeout out",
    ],
    [
      "10,000 levels under pause",
      nested(10_000, "pause"),
      'autoPause.pause.pause: invalid value {"pause":"{...1 keys}"}: unknown field; autoPause.pause takes only whenProbedIdle',
    ],
    [
      "10,000 levels of arrays in probes",
      { probes: nestedArrays(10_000) },
      'autoPause.probes[0]: invalid value ["[...1 items]"]: use an object with name, command',
    ],
    [
      "10,000 levels in a regex",
      idle(nested(10_000, "a")),
      'autoPause.pause.whenProbedIdle.messageRegex: invalid value {"a":"{...1 keys}"}: use a non-empty JavaScript regular expression',
    ],
    // unknown keys, at every level
    [
      "unknown key at the root",
      { bogus: 1 },
      `autoPause.bogus: invalid value 1: ${UNKNOWN}autoPause takes only probes, pause, resume, timeout`,
    ],
    [
      "pause as a string",
      { pause: "x" },
      'autoPause.pause: invalid value "x": use an object with whenProbedIdle, afterInactivity, pauseTime; or leave autoPause.pause out',
    ],
    [
      "unknown key in pause",
      { pause: { bogus: 1 } },
      `autoPause.pause.bogus: invalid value 1: ${UNKNOWN}autoPause.pause takes only whenProbedIdle, afterInactivity, pauseTime`,
    ],
    [
      "unknown key in a probe",
      { probes: [{ ...probe, shell: true }] },
      `autoPause.probes[0].shell: invalid value true: ${UNKNOWN}autoPause.probes[0] takes only name, command, periodSeconds, timeoutSeconds`,
    ],
    [
      "unknown key in whenProbedIdle",
      {
        probes: [probe],
        pause: { whenProbedIdle: { probe: "Active", messageRegex: "x", thresholdDuration: 0, flags: "i" } },
      },
      `autoPause.pause.whenProbedIdle.flags: invalid value "i": ${UNKNOWN}`,
    ],
    [
      "unknown key in resume",
      { resume: { at: "1h" } },
      `autoPause.resume.at: invalid value "1h": ${UNKNOWN}autoPause.resume takes only whenProbedSchedule`,
    ],
    [
      "unknown key in whenProbedSchedule",
      schedule({ probe: "Active", zone: "UTC" }),
      `autoPause.resume.whenProbedSchedule.zone: invalid value "UTC": ${UNKNOWN}`,
    ],
    [
      "unknown key in timeout",
      { timeout: { after: "1m", action: "kill", x: 1 } },
      `autoPause.timeout.x: invalid value 1: ${UNKNOWN}autoPause.timeout takes only after, action`,
    ],
    [
      "__proto__ from JSON.parse",
      JSON.parse('{"__proto__": {"x": 1}}'),
      `autoPause.__proto__: invalid value {"x":1}: ${UNKNOWN}`,
    ],
    ["a key that is not a name", { "a.b": 1 }, `autoPause["a.b"]: invalid value 1: ${UNKNOWN}`],
    [
      "a 100,000-character key is cut",
      { ["k".repeat(100_000)]: 1 },
      `autoPause["${"k".repeat(60)}..."]: invalid value 1: ${UNKNOWN}`,
    ],
    // wrong types and values, every field
    ["the document as an array", [], "autoPause: invalid value []: use an object with probes, pause, resume, timeout"],
    ["the document null", null, "autoPause: invalid value null: use an object with probes, pause, resume, timeout"],
    ["the document a string", "x", 'autoPause: invalid value "x": use an object with probes'],
    [
      "a probe null",
      { probes: [null] },
      "autoPause.probes[0]: invalid value null: use an object with name, command, periodSeconds, timeoutSeconds",
    ],
    [
      "17 probes",
      { probes: Array.from({ length: 17 }, (_, i) => ({ name: `p${i}`, command: ["true"] })) },
      'autoPause.probes: invalid value ["{...2 keys}","{...2 keys}","{...2 keys}","...(17 items)"]: use at most 16 probes',
    ],
    [
      "probe name a number",
      { probes: [{ ...probe, name: 1 }] },
      "autoPause.probes[0].name: invalid value 1: use 1-63 letters",
    ],
    [
      "probe name of 1 MB is cut",
      { probes: [{ ...probe, name: "x".repeat(1_000_000) }] },
      `autoPause.probes[0].name: invalid value "${"x".repeat(60)}...(1000000 characters)": use 1-63 letters`,
    ],
    [
      "command a string",
      { probes: [{ ...probe, command: "echo idle" }] },
      'autoPause.probes[0].command: invalid value "echo idle": use a non-empty array of strings',
    ],
    [
      "command with a number",
      { probes: [{ ...probe, command: ["sleep", 1] }] },
      'autoPause.probes[0].command: invalid value ["sleep",1]: use a non-empty array of strings',
    ],
    [
      "command with an array",
      { probes: [{ ...probe, command: [["a"]] }] },
      'autoPause.probes[0].command: invalid value ["[...1 items]"]: use a non-empty array of strings',
    ],
    ["command of 65 arguments", { probes: [{ ...probe, command: Array(65).fill("a") }] }, "at most 64 arguments"],
    [
      "command argument over 4096 characters",
      { probes: [{ ...probe, command: ["echo", "a".repeat(4097)] }] },
      'autoPause.probes[0].command[1]: invalid value "aaaa',
    ],
    [
      "command with a NUL",
      { probes: [{ ...probe, command: ["a\u0000b"] }] },
      'autoPause.probes[0].command[0]: invalid value "a\\u0000b": must not contain NUL bytes',
    ],
    [
      "periodSeconds a string",
      { probes: [{ ...probe, periodSeconds: "30" }] },
      'autoPause.probes[0].periodSeconds: invalid value "30": use a whole number of seconds, at least 1 and at most 86400',
    ],
    [
      "periodSeconds fractional",
      { probes: [{ ...probe, periodSeconds: 1.5 }] },
      "autoPause.probes[0].periodSeconds: invalid value 1.5: use a whole number of seconds",
    ],
    [
      "periodSeconds 1e300",
      { probes: [{ ...probe, periodSeconds: 1e300 }] },
      "autoPause.probes[0].periodSeconds: invalid value 1e+300: use a whole number of seconds, at least 1 and at most 86400",
    ],
    [
      "timeoutSeconds null",
      { probes: [{ ...probe, timeoutSeconds: null }] },
      "autoPause.probes[0].timeoutSeconds: invalid value null: use a whole number of seconds",
    ],
    [
      "whenProbedIdle null",
      { probes: [probe], pause: { whenProbedIdle: null } },
      "autoPause.pause.whenProbedIdle: invalid value null: use an object with probe, messageRegex, thresholdDuration",
    ],
    [
      "idle probe a number",
      { probes: [probe], pause: { whenProbedIdle: { probe: 1, messageRegex: "x", thresholdDuration: 0 } } },
      "autoPause.pause.whenProbedIdle.probe: invalid value 1: reference a probe defined under autoPause.probes (one of: Active)",
    ],
    [
      "thresholdDuration an object",
      {
        probes: [probe],
        pause: { whenProbedIdle: { probe: "Active", messageRegex: "x", thresholdDuration: { m: 1 } } },
      },
      'autoPause.pause.whenProbedIdle.thresholdDuration: invalid value {"m":1}: use a non-negative duration like 30s',
    ],
    [
      "thresholdDuration over 366 days",
      {
        probes: [probe],
        pause: { whenProbedIdle: { probe: "Active", messageRegex: "x", thresholdDuration: "8785h" } },
      },
      'autoPause.pause.whenProbedIdle.thresholdDuration: invalid value "8785h": use at most 366 days',
    ],
    [
      "afterInactivity of 11 digits of hours",
      { pause: { afterInactivity: "99999999999h" } },
      'autoPause.pause.afterInactivity: invalid value "99999999999h": use at most 366 days (8784h, 31622400 seconds)',
    ],
    [
      "afterInactivity a 200-character string",
      { pause: { afterInactivity: "1m".repeat(100) } },
      '...(200 characters)": use a non-negative duration like 30s',
    ],
    [
      "afterInactivity false",
      { pause: { afterInactivity: false } },
      "autoPause.pause.afterInactivity: invalid value false: use a non-negative duration",
    ],
    [
      "pauseTime a number",
      { pause: { pauseTime: 5 } },
      "autoPause.pause.pauseTime: invalid value 5: use an RFC3339 time with a zone",
    ],
    [
      "pauseTime null",
      { pause: { pauseTime: null } },
      "autoPause.pause.pauseTime: invalid value null: use an RFC3339 time with a zone",
    ],
    [
      "resume an array",
      { resume: [] },
      "autoPause.resume: invalid value []: use an object with whenProbedSchedule; or leave autoPause.resume out",
    ],
    [
      "whenProbedSchedule a string",
      schedule("Active"),
      'autoPause.resume.whenProbedSchedule: invalid value "Active": use an object with probe, timeFormat, leadTime',
    ],
    [
      "timeFormat null",
      schedule({ probe: "Active", timeFormat: null }),
      'autoPause.resume.whenProbedSchedule.timeFormat: invalid value null: use "unix"',
    ],
    [
      "leadTime true",
      schedule({ probe: "Active", leadTime: true }),
      "autoPause.resume.whenProbedSchedule.leadTime: invalid value true: use a non-negative duration",
    ],
    ["timeout a number", { timeout: 60 }, "autoPause.timeout: invalid value 60: use an object with after, action"],
    [
      "timeout without action",
      { timeout: { after: "1m" } },
      'autoPause.timeout.action: invalid value undefined: use "pause" or "kill" (required)',
    ],
    [
      "timeout.after null",
      { timeout: { after: null, action: "kill" } },
      "autoPause.timeout.after: invalid value null: use a non-negative duration",
    ],
    // the tenant's pattern: RE2 syntax, bounded
    [
      "messageRegex a number",
      idle(5),
      "autoPause.pause.whenProbedIdle.messageRegex: invalid value 5: use a non-empty JavaScript regular expression",
    ],
    ["messageRegex empty", idle(""), 'autoPause.pause.whenProbedIdle.messageRegex: invalid value "": use a non-empty'],
    [
      "a backreference",
      idle("(a)\\1"),
      `autoPause.pause.whenProbedIdle.messageRegex: invalid value "(a)\\\\1": use a non-empty JavaScript regular expression ${RE2}`,
    ],
    ["a lookahead", idle("^(?=idle)"), "RE2 says: invalid or unsupported Perl syntax: `(?=`"],
    ["a negative lookahead", idle("^(?!busy)"), "RE2 says: invalid or unsupported Perl syntax: `(?!`"],
    [
      "a lookbehind",
      idle("(?<=x)idle"),
      `invalid value "(?<=x)idle": use a non-empty JavaScript regular expression ${RE2}`,
    ],
    [
      "a \\u escape",
      idle("caf\\u00e9"),
      'write \\x{e9} for \\u00e9), e.g. "^inactive$"; RE2 says: invalid escape sequence: `\\u`',
    ],
    ["an unclosed group", idle("(idle"), "RE2 says: missing closing ): `(idle`"],
    ["a repeat over 1000", idle("a{1001}"), "RE2 says: invalid repeat count: `{1001}`"],
    ["a pattern over 512 characters", idle("a".repeat(513)), "at most 512 characters (this one has 513)"],
    [
      "a pattern over 128 instructions",
      idle("\\p{L}{127}"),
      "this pattern compiles to 129 RE2 instructions, over the limit of 128",
    ],
  ])("%s", (_name, input, message) => {
    let err: unknown;
    try {
      validateAutoPause(input);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).message).toContain(message);
    expect((err as ValidationError).message.length).toBeLessThan(500);
  });

  it("keeps what RE2 accepts that JavaScript did, and a bit more", () => {
    for (const [pattern, yes, no] of [
      ["^inactive$", "inactive", "inactive now"],
      ["^(idle|inactive|no jobs)$", "no jobs", "jobs"],
      ["\\bidle\\b", "is idle now", "idleness"],
      ["^\\d+ sessions?$", "0 sessions", "x sessions"],
      ["(?i)^IDLE$", "idle", "idle!"],
      ["^caf\\x{e9}$", "café", "cafe"],
      ["^(a+)+$", "aaaa", "aaaa!"],
    ] as const) {
      const p = validateAutoPause(idle(pattern));
      expect([p.idle!.messageRegex.test(yes), p.idle!.messageRegex.test(no)], pattern).toEqual([true, false]);
    }
  });
});

// ---- property: total over random and mutated JSON ------------------------------------------

/** mulberry32: a seeded generator, so a failure reproduces from the printed seed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = [
  "probes",
  "pause",
  "resume",
  "timeout",
  "name",
  "command",
  "periodSeconds",
  "timeoutSeconds",
  "whenProbedIdle",
  "probe",
  "messageRegex",
  "thresholdDuration",
  "afterInactivity",
  "pauseTime",
  "whenProbedSchedule",
  "timeFormat",
  "leadTime",
  "after",
  "action",
  "__proto__",
  "constructor",
  "toString",
  "",
];
const STRINGS = [
  "",
  "Active",
  "0",
  "30s",
  "1h30m",
  "-5m",
  "unix",
  "datetime",
  "pause",
  "kill",
  "^(a+)+$",
  "(",
  "(?=a)",
  "\\1",
  "2026-09-04T10:00:00Z",
  "\u0000",
  "é",
  "a".repeat(5000),
];
const NUMBERS = [0, -0, 1, -1, 1.5, 30, 86_400, 86_401, 1e21, -1e308, 1e308, Number.MAX_SAFE_INTEGER];

function randomJson(r: () => number, depth: number): unknown {
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(r() * xs.length)];
  const k = r();
  if (depth <= 0 || k < 0.35) return pick<unknown>([null, true, false, pick(NUMBERS), pick(STRINGS), pick(WORDS)]);
  if (k < 0.6) return Array.from({ length: Math.floor(r() * 4) }, () => randomJson(r, depth - 1));
  const o: Record<string, unknown> = {};
  for (let i = Math.floor(r() * 4); i > 0; i--) o[pick(WORDS)] = randomJson(r, depth - 1);
  return o;
}

const VALID = {
  probes: [
    { name: "Active", command: ["sh", "-c", "echo inactive"], periodSeconds: 30, timeoutSeconds: 5 },
    { name: "Cron", command: ["cron-next"] },
  ],
  pause: {
    whenProbedIdle: { probe: "Active", messageRegex: "^inactive$", thresholdDuration: "10m" },
    afterInactivity: "30m",
    pauseTime: "2026-09-04T18:00:00+08:00",
  },
  resume: { whenProbedSchedule: { probe: "Cron", timeFormat: "unix", leadTime: "5m" } },
  timeout: { after: 600, action: "pause" },
};

/** The valid document with one node replaced, removed, wrapped deep, nulled or given an unknown sibling. */
function mutate(r: () => number): unknown {
  const doc = JSON.parse(JSON.stringify(VALID));
  let node: Record<string, unknown> = doc;
  for (let steps = Math.floor(r() * 4); steps > 0; steps--) {
    const keys = Object.keys(node).filter((key) => node[key] !== null && typeof node[key] === "object");
    if (!keys.length) break;
    node = node[keys[Math.floor(r() * keys.length)]] as Record<string, unknown>;
  }
  const keys = Object.keys(node);
  const key = keys.length && r() < 0.8 ? keys[Math.floor(r() * keys.length)] : WORDS[Math.floor(r() * WORDS.length)];
  const k = r();
  if (k < 0.45) node[key] = randomJson(r, 3);
  else if (k < 0.6) delete node[key];
  else if (k < 0.75) node[key] = nested(1 + Math.floor(r() * 20_000), WORDS[Math.floor(r() * WORDS.length)], node[key]);
  else if (k < 0.9) node[`${key}x`] = randomJson(r, 2);
  else node[key] = null;
  return r() < 0.5 ? doc : throughJsonText(doc);
}

/** As the service receives it: JSON.parse of the text (JSON.stringify itself overflows the stack on the deepest ones). */
function throughJsonText(doc: unknown): unknown {
  try {
    return JSON.parse(JSON.stringify(doc));
  } catch {
    return doc;
  }
}

function shortJson(v: unknown): string {
  try {
    return String(JSON.stringify(v)).slice(0, 300);
  } catch {
    return "(too deep to print)";
  }
}

describe("validateAutoPause is total", () => {
  it("returns a policy or throws a bounded ValidationError for 3,000 random and 3,000 mutated documents", () => {
    const seed = 20261201;
    const r = rng(seed);
    let valid = 0;
    for (let i = 0; i < 6000; i++) {
      const input = i % 2 ? randomJson(r, 5) : mutate(r);
      try {
        const policy = validateAutoPause(input);
        expect(Array.isArray(policy.probes), `seed ${seed} case ${i}`).toBe(true);
        valid++;
      } catch (err) {
        if (!(err instanceof ValidationError))
          throw new Error(`seed ${seed} case ${i}: threw ${String(err)} for ${shortJson(input)}`);
        expect(err.message, `seed ${seed} case ${i}`).toMatch(/^autoPause([.[][^ ]*)?: invalid value .+: /s);
        expect(err.message.length, `seed ${seed} case ${i}`).toBeLessThan(500);
      }
    }
    // the mutations keep some documents valid, so both outcomes are exercised
    expect(valid).toBeGreaterThan(50);
  });
});
