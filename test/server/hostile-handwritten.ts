// Hostile requests no schema states: whole bodies of the wrong kind, the kernel's argv limits,
// base64 framing, the create request's cross-field bounds, uploads that are not archives, and
// the autoPause document (parsed in code, not by the route schema). Each names the field its
// error must name.
import { type HostileCase, nestedArrays, nestedObjects } from "./hostile-cases.ts";

const JSON_TYPE = { "content-type": "application/json" };

const nestArrays = (depth: number): string => nestedArrays(depth).text;

/** Bodies that are not the JSON object a route expects, for each JSON route. */
function wrongBodies(id: string): HostileCase[] {
  const routes = [
    { op: "createSandbox", url: "/v1/sandboxes" },
    { op: "execSandbox", url: `/v1/sandboxes/${id}/exec` },
    { op: "waitSandbox", url: `/v1/sandboxes/${id}/wait` },
  ];
  const bodies: { what: string; payload: string; headers?: Record<string, string>; field: string }[] = [
    { what: "a JSON array", payload: "[]", field: "body" },
    { what: "a JSON string", payload: '"x"', field: "body" },
    { what: "a JSON number", payload: "5", field: "body" },
    { what: "JSON true", payload: "true", field: "body" },
    { what: "invalid JSON", payload: "{nope", field: "body" },
    { what: "truncated JSON", payload: '{"command": ["tr', field: "body" },
    { what: "an empty JSON body", payload: "", field: "body" },
    { what: "a __proto__ key", payload: '{"__proto__": {"polluted": true}}', field: "body" },
    {
      what: "a constructor.prototype key",
      payload: '{"constructor": {"prototype": {"polluted": true}}}',
      field: "body",
    },
    { what: "arrays nested 100000 deep", payload: nestArrays(100_000), field: "body" },
    { what: "plain text", payload: "hello", headers: { "content-type": "text/plain" }, field: "body" },
    {
      what: "an XML content type",
      payload: "<x/>",
      headers: { "content-type": "application/xml" },
      field: "content-type",
    },
    {
      what: "a tar content type",
      payload: "{}",
      headers: { "content-type": "application/x-tar" },
      field: "content-type",
    },
    { what: "9 MB of JSON", payload: JSON.stringify({ x: "y".repeat(9 * 1024 * 1024) }), field: "body" },
  ];
  return routes.flatMap((r) =>
    bodies.map((b) => ({
      name: `${r.op} a body of ${b.what}`,
      method: "POST" as const,
      url: r.url,
      headers: b.headers ?? JSON_TYPE,
      payload: b.payload,
      field: b.field,
    })),
  );
}

function execCases(id: string): HostileCase[] {
  const url = `/v1/sandboxes/${id}/exec`;
  const exec = (what: string, payload: unknown, field: string): HostileCase => ({
    name: `execSandbox ${what}`,
    method: "POST",
    url,
    payload,
    field,
  });
  const wide = "é".repeat(70_000); // 70000 characters (within the schema's count), 140000 bytes
  return [
    exec("argv[0] with a NUL byte", { command: ["true\u0000x"] }, "command.0"),
    exec("an argument of 140000 bytes in 70000 characters", { command: ["echo", wide] }, "command.1"),
    exec(
      "argv over the total bound (2 x 100000 bytes)",
      { command: ["echo", "a".repeat(100_000), "b".repeat(100_000)] },
      "command",
    ),
    exec(
      "argv + env over the total bound",
      { command: ["true"], env: { A: "a".repeat(100_000), B: "b".repeat(100_000) } },
      "command",
    ),
    exec("an env NAME=value over MAX_ARG_STRLEN", { command: ["true"], env: { K: "v".repeat(131_070) } }, "env.K"),
    exec("an env value with a NUL byte at the end", { command: ["true"], env: { A: "x\u0000" } }, "env.A"),
    exec("cwd absolute with a NUL byte", { command: ["true"], cwd: "/tmp\u0000x" }, "cwd"),
    exec("cwd that does not exist", { command: ["true"], cwd: "/no/such/dir" }, "cwd"),
    exec("stdin of 5 base64 characters", { command: ["cat"], stdin: "abcde" }, "stdin"),
    exec("stdin with padding in the middle", { command: ["cat"], stdin: "ab=c" }, "stdin"),
    exec("stdin with padding of the wrong length", { command: ["cat"], stdin: "YQ=" }, "stdin"),
    exec("stdin in base64url", { command: ["cat"], stdin: "-_-_" }, "stdin"),
    exec(
      "stdin over the decoded limit",
      { command: ["cat"], stdin: Buffer.alloc(4 * 1024 * 1024 + 3).toString("base64") },
      "stdin",
    ),
    exec("command of 5000 empty strings", { command: Array.from({ length: 5000 }, () => "") }, "command"),
  ];
}

function createCases(): HostileCase[] {
  const create = (what: string, payload: unknown, field: string): HostileCase => ({
    name: `createSandbox ${what}`,
    method: "POST",
    url: "/v1/sandboxes",
    payload,
    field,
  });
  return [
    create("env over its total size", { env: { A: "a".repeat(40_000), B: "b".repeat(40_000) } }, "env"),
    create("env value with a NUL (poisons every later exec)", { env: { A: "x\u0000y" } }, "env.A"),
    create("metadata value with a NUL", { metadata: { note: "x\u0000y" } }, "metadata.note"),
    create("ttlSeconds over the maximum", { ttlSeconds: 10_000_000 }, "ttlSeconds"),
    create("idleTimeoutSeconds over the maximum", { idleTimeoutSeconds: 10_000_000 }, "idleTimeoutSeconds"),
    create("an unknown profile", { profile: "gpu" }, "profile"),
    create("an unknown size", { size: "huge" }, "size"),
    create("a size named like an Object property", { size: "constructor" }, "size"),
    create("a profile named like an Object property", { profile: "__proto__" }, "profile"),
    create("a clientKey with a space", { clientKey: "a b" }, "clientKey"),
    create("a clientKey in Cyrillic", { clientKey: "ключ" }, "clientKey"),
  ];
}

function uploadCases(id: string): HostileCase[] {
  const url = `/v1/sandboxes/${id}/files?path=/workspace`;
  return [
    {
      name: "putFiles a JSON body instead of an archive",
      method: "PUT",
      url,
      headers: JSON_TYPE,
      payload: "{}",
      field: "content-type",
    },
    {
      name: "putFiles a text body instead of an archive",
      method: "PUT",
      url,
      headers: { "content-type": "text/plain" },
      payload: "hello",
      field: "content-type",
    },
    {
      name: "putFiles into a directory that does not exist",
      method: "PUT",
      url: `/v1/sandboxes/${id}/files?path=/usr/share/sbx-nope`,
      headers: { "content-type": "application/x-tar" },
      payload: Buffer.alloc(1024),
      field: "archive",
    },
  ];
}

/** The autoPause document (runtime/autopause/spec.ts): strict and total, every error a 400 naming the path. */
function autoPauseCases(): HostileCase[] {
  const probe = { name: "Idle", command: ["cat", "/workspace/state"], periodSeconds: 5, timeoutSeconds: 1 };
  const ap = (what: string, autoPause: unknown, field: string): HostileCase => ({
    name: `createSandbox autoPause ${what}`,
    method: "POST",
    url: "/v1/sandboxes",
    payload: { autoPause },
    field,
  });
  const idle = (extra: Record<string, unknown>) => ({
    probes: [probe],
    pause: { whenProbedIdle: { probe: "Idle", messageRegex: "^idle$", thresholdDuration: "0s", ...extra } },
  });
  return [
    ap("probes as a string", { probes: "x" }, "autoPause.probes"),
    ap("probes as an object", { probes: { name: "x" } }, "autoPause.probes"),
    ap("probes as a number", { probes: 5 }, "autoPause.probes"),
    ap("probes nested 10000 deep", { probes: nestedArrays(10_000) }, "autoPause.probes"),
    ap("pause nested 10000 deep", { pause: nestedObjects(10_000) }, "autoPause.pause"),
    ap("timeout null", { timeout: null }, "autoPause.timeout"),
    ap("timeout as a string", { timeout: "1h" }, "autoPause.timeout"),
    ap("pause as a string", { pause: "x" }, "autoPause.pause"),
    ap("an unknown key under pause", { pause: { bogus: 1 } }, "autoPause.pause.bogus"),
    ap("an unknown top-level key", { bogus: 1 }, "autoPause.bogus"),
    ap("a probe that is null", { probes: [null] }, "autoPause.probes"),
    ap("a probe name that is a number", { probes: [{ ...probe, name: 5 }] }, "autoPause.probes"),
    ap("a probe command as a string", { probes: [{ ...probe, command: "true" }] }, "autoPause.probes"),
    ap("a probe command with a NUL byte", { probes: [{ ...probe, command: ["cat", "a\u0000b"] }] }, "autoPause.probes"),
    ap("a probe periodSeconds as a string", { probes: [{ ...probe, periodSeconds: "5" }] }, "autoPause.probes"),
    ap("an unknown key in a probe", { probes: [{ ...probe, shell: true }] }, "autoPause.probes"),
    ap("messageRegex as a number", idle({ messageRegex: 5 }), "autoPause.pause.whenProbedIdle.messageRegex"),
    ap(
      "messageRegex that does not compile",
      idle({ messageRegex: "(" }),
      "autoPause.pause.whenProbedIdle.messageRegex",
    ),
    ap(
      "thresholdDuration as an object",
      idle({ thresholdDuration: { s: 1 } }),
      "autoPause.pause.whenProbedIdle.thresholdDuration",
    ),
    ap("timeout.after as a boolean", { timeout: { after: true, action: "pause" } }, "autoPause.timeout.after"),
    ap("timeout.action unknown", { timeout: { after: "1h", action: "explode" } }, "autoPause.timeout.action"),
    ap("afterInactivity negative", { pause: { afterInactivity: -5 } }, "autoPause.pause.afterInactivity"),
    ap("pauseTime that is not a time", { pause: { pauseTime: "tomorrow" } }, "autoPause.pause.pauseTime"),
    ap(
      "whenProbedSchedule with an unknown timeFormat",
      { probes: [probe], resume: { whenProbedSchedule: { probe: "Idle", timeFormat: "julian" } } },
      "autoPause.resume.whenProbedSchedule.timeFormat",
    ),
  ];
}

export function handwrittenCases(id: string): HostileCase[] {
  return [...wrongBodies(id), ...execCases(id), ...createCases(), ...uploadCases(id), ...autoPauseCases()];
}

export const AUTOPAUSE_PREFIX = "createSandbox autoPause ";
