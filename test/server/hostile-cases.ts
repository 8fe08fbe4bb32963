// Hostile requests generated from the API's own request schemas (runtime/server/schemas.ts via
// the route table): for every route's params, querystring and body, each field gets the bad
// values its schema rules out (wrong JSON types, null, out of range, too long, too many, NUL
// bytes, unknown fields, bad map keys, deep nesting, huge arrays), each placed into an otherwise
// valid request. Hand-written cases add what no schema states: the kernel's argv limits, base64
// framing, body-level and transport-level abuse, and the autoPause document.
import { type RouteDef, sandboxRoutes } from "../../runtime/server/routes.ts";
import { PATTERNS } from "../../runtime/server/schemas.ts";

export interface HostileCase {
  name: string;
  method: RouteDef["method"];
  url: string;
  headers?: Record<string, string>;
  /** a string or Buffer is sent as is; anything else as JSON */
  payload?: unknown;
  /** what the error message must name (a field path, "body", "content-type", "url") */
  field: string;
}

interface Schema {
  type?: string | string[];
  properties?: Record<string, Schema>;
  required?: string[];
  additionalProperties?: boolean | Schema;
  items?: Schema;
  propertyNames?: { pattern?: string; maxLength?: number };
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  enum?: string[];
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  minItems?: number;
  maxItems?: number;
  maxProperties?: number;
}

interface BadValue {
  /** the field the error must name, below the body (or query) root */
  field: string[];
  /** where the value goes; differs from field for array items (the whole array is replaced) */
  at: string[];
  what: string;
  value?: unknown;
  /** remove the field instead (a required one) */
  remove?: boolean;
}

const bad = (path: string[], what: string, value: unknown): BadValue => ({ field: path, at: path, what, value });

/** JSON text spliced in as is: values nested thousands deep overflow JSON.stringify's stack. */
export class RawJson {
  constructor(readonly text: string) {}
}

export const nestedArrays = (depth: number) => new RawJson(`${"[".repeat(depth)}1${"]".repeat(depth)}`);
export const nestedObjects = (depth: number) => new RawJson(`${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`);

/** JSON.stringify, with RawJson values spliced in. */
export function toJson(payload: unknown): string {
  const raws: string[] = [];
  const text = JSON.stringify(payload, (_k, v) =>
    v instanceof RawJson ? `\u0001RAW${raws.push(v.text) - 1}\u0001` : v,
  );
  return text.replace(/"\\u0001RAW(\d+)\\u0001"/g, (_m, i: string) => raws[Number(i)]);
}

function typesOf(s: Schema): string[] {
  return s.type === undefined ? [] : Array.isArray(s.type) ? s.type : [s.type];
}

/** A JSON value of every type the schema does not allow. */
function wrongTypes(s: Schema): { what: string; value: unknown }[] {
  const allowed = typesOf(s);
  if (!allowed.length) return [];
  const ok = (t: string) => allowed.includes(t) || (t === "integer" && allowed.includes("number"));
  const samples: [string, string, unknown][] = [
    ["string", "a string", "5"],
    ["integer", "a number", 5],
    ["number", "a fraction", 1.5],
    ["boolean", "a boolean", true],
    ["null", "null", null],
    ["array", "an array", ["x"]],
    ["object", "an object", { x: 1 }],
  ];
  return samples.filter(([t]) => !ok(t)).map(([, what, value]) => ({ what, value }));
}

/** A string that breaks the given pattern (and nothing else). */
const PATTERN_BREAKERS: Record<string, { what: string; value: string }[]> = {
  [PATTERNS.absolutePath]: [{ what: "a relative path", value: "workspace/x" }],
  [PATTERNS.base64]: [{ what: "not base64", value: "not base64!" }],
  [PATTERNS.lines]: [
    { what: "negative", value: "-1" },
    { what: "not a number", value: "ten" },
    { what: "7 digits", value: "1234567" },
  ],
};

function stringBad(s: Schema, path: string[]): BadValue[] {
  const out: BadValue[] = [bad(path, "a NUL byte", "a\u0000b")];
  if ((s.minLength ?? 0) >= 1) out.push(bad(path, "empty", ""));
  if (s.maxLength !== undefined) out.push(bad(path, `${s.maxLength + 1} characters`, "x".repeat(s.maxLength + 1)));
  for (const b of PATTERN_BREAKERS[s.pattern ?? ""] ?? []) out.push(bad(path, b.what, b.value));
  if (s.enum)
    out.push(bad(path, "not in the enum", "bogus"), bad(path, "the enum in capitals", s.enum[0].toUpperCase()));
  return out;
}

function numberBad(s: Schema, path: string[]): BadValue[] {
  const out: BadValue[] = [];
  if (s.minimum !== undefined) out.push(bad(path, "below the minimum", s.minimum - 1));
  if (s.exclusiveMinimum !== undefined) out.push(bad(path, "at the exclusive minimum", s.exclusiveMinimum));
  if (s.maximum !== undefined) out.push(bad(path, "above the maximum", s.maximum + 1));
  out.push(bad(path, "1e308", 1e308), bad(path, "-1e308", -1e308));
  return out;
}

function arrayBad(s: Schema, path: string[]): BadValue[] {
  const out: BadValue[] = [];
  if ((s.minItems ?? 0) >= 1) out.push(bad(path, "empty", []));
  if (s.maxItems !== undefined) {
    out.push(
      bad(
        path,
        `${s.maxItems + 1} items`,
        Array.from({ length: s.maxItems + 1 }, () => "x"),
      ),
    );
    out.push(
      bad(
        path,
        "100000 items",
        Array.from({ length: 100_000 }, () => "x"),
      ),
    );
  }
  // a bad second item: the first stays valid, so the index in the error is checked too
  for (const b of s.items ? badValues(s.items, [...path, "1"]) : []) {
    if (!b.remove) out.push({ ...b, at: path, value: ["x", b.value], what: `item 1 ${b.what}` });
  }
  return out;
}

function objectBad(s: Schema, path: string[]): BadValue[] {
  const out: BadValue[] = [];
  for (const [k, p] of Object.entries(s.properties ?? {})) out.push(...badValues(p, [...path, k]));
  for (const k of s.required ?? []) out.push({ field: [...path, k], at: [...path, k], what: "missing", remove: true });
  if (s.additionalProperties === false) out.push(bad([...path, "bogusField"], "an unknown field", 1));
  if (typeof s.additionalProperties === "object") out.push(...mapBad(s, path));
  return out;
}

const ENV_KEYS = ["A-B", "1A", "A=B", "", "A\u0000B", "a b"];
const METADATA_KEYS = ["-a", "a-", "", "a\u0000b", "a/b", "k".repeat(64)];

/** Maps (env, metadata): bad keys, bad values, too many entries. */
function mapBad(s: Schema, path: string[]): BadValue[] {
  const keys = s.propertyNames?.pattern === PATTERNS.metadataKey ? [...METADATA_KEYS] : [...ENV_KEYS];
  if (s.propertyNames?.maxLength !== undefined) keys.push("K".repeat(s.propertyNames.maxLength + 1));
  const out: BadValue[] = keys.map((k) => ({
    // an empty key cannot be told apart in a dotted path: the map itself is named
    field: k === "" ? path : [...path, k],
    at: [...path, k],
    what: `the key ${JSON.stringify(k.length > 20 ? `${k.slice(0, 8)}...(${k.length})` : k)}`,
    value: "v",
  }));
  for (const b of badValues(s.additionalProperties as Schema, [...path, "A"])) if (!b.remove) out.push(b);
  if (s.maxProperties !== undefined) {
    out.push(
      bad(
        path,
        `${s.maxProperties + 1} entries`,
        Object.fromEntries(Array.from({ length: s.maxProperties + 1 }, (_, i) => [`K${i}`, "v"])),
      ),
    );
  }
  return out;
}

/** Every bad value for one schema at `path`. */
export function badValues(s: Schema, path: string[]): BadValue[] {
  const t = typesOf(s);
  const out: BadValue[] = wrongTypes(s).map((w) => bad(path, w.what, w.value));
  if (t.length) out.push(bad(path, "nested 5000 deep", nestedArrays(5000)));
  if (t.includes("string")) out.push(...stringBad(s, path));
  if (t.includes("integer") || t.includes("number")) out.push(...numberBad(s, path));
  if (t.includes("array")) out.push(...arrayBad(s, path));
  if (t.includes("object")) out.push(...objectBad(s, path));
  return out;
}

/** A copy of base with the bad value set (or the field removed) at b.at. */
function withValue(base: Record<string, unknown>, b: BadValue): Record<string, unknown> {
  const root = structuredClone(base);
  let obj: Record<string, unknown> = root;
  for (const k of b.at.slice(0, -1)) {
    if (typeof obj[k] !== "object" || obj[k] === null || Array.isArray(obj[k])) obj[k] = {};
    obj = obj[k] as Record<string, unknown>;
  }
  const last = b.at[b.at.length - 1];
  if (b.remove) delete obj[last];
  else obj[last] = b.value;
  return root;
}

export const VALID_BODIES: Record<string, Record<string, unknown>> = {
  createSandbox: {},
  waitSandbox: { timeoutSeconds: 1 },
  execSandbox: { command: ["true"] },
};

const url = (r: RouteDef, id: string, query = "") => r.url.replace(":id", id) + query;

function bodyCases(r: RouteDef, id: string): HostileCase[] {
  const schema = r.schema?.body as Schema | undefined;
  if (!schema) return [];
  const base = VALID_BODIES[r.operationId] ?? {};
  return objectBad(schema, []).map((b) => ({
    name: `${r.operationId} body.${b.field.join(".")}: ${b.what}`,
    method: r.method,
    url: url(r, id),
    payload: withValue(base, b),
    field: b.field.join("."),
  }));
}

function queryCases(r: RouteDef, id: string): HostileCase[] {
  const schema = r.schema?.querystring as Schema | undefined;
  if (!schema) return [];
  const valid: Record<string, string> = schema.required?.includes("path") ? { path: "/workspace" } : {};
  const qs = (q: Record<string, string>) => (Object.keys(q).length ? `?${new URLSearchParams(q).toString()}` : "");
  const cases: HostileCase[] = [];
  for (const [k, p] of Object.entries(schema.properties ?? {})) {
    for (const b of stringBad(p, [k]))
      cases.push({
        name: `${r.operationId} ${r.method} query ${k}: ${b.what}`,
        method: r.method,
        url: url(r, id, qs({ ...valid, [k]: String(b.value) })),
        field: `querystring.${k}`,
      });
    // ?k=a&k=b arrives as an array
    cases.push({
      name: `${r.operationId} ${r.method} query ${k}: given twice`,
      method: r.method,
      url: url(r, id, `${qs(valid)}${Object.keys(valid).length ? "&" : "?"}${k}=a&${k}=b`),
      field: `querystring.${k}`,
    });
  }
  for (const k of schema.required ?? [])
    cases.push({
      name: `${r.operationId} ${r.method} query ${k}: missing`,
      method: r.method,
      url: url(r, id),
      field: `querystring.${k}`,
    });
  cases.push({
    name: `${r.operationId} ${r.method} query: an unknown parameter`,
    method: r.method,
    url: url(r, id, qs({ ...valid, bogusParam: "1" })),
    field: "querystring.bogusParam",
  });
  return cases;
}

function paramCases(r: RouteDef): HostileCase[] {
  if (!r.schema?.params) return [];
  const body = r.schema.body ? VALID_BODIES[r.operationId] : undefined;
  const mk = (what: string, id: string, field: string): HostileCase => ({
    name: `${r.operationId} ${r.method} params.id: ${what}`,
    method: r.method,
    url: url(r, id),
    payload: body,
    field,
  });
  return [
    mk("254 characters", "a".repeat(254), "params.id"),
    mk("a NUL byte (%00)", "sbx-%00", "params.id"),
    mk("bad percent-encoding", "sbx-%zz", "url"),
    mk("2000 characters", "a".repeat(2000), "url"),
  ];
}

/** All generated cases for the sandbox routes; `id` is a live sandbox, so nothing fails for lack of one. */
export function generatedCases(id: string): HostileCase[] {
  return sandboxRoutes.flatMap((r) => [...paramCases(r), ...queryCases(r, id), ...bodyCases(r, id)]);
}
