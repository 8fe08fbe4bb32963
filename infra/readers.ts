// Primitive readers for stack config values. Each one names the key, the bad value and the
// fix (via ValidationError) and returns a copy; nothing here mutates its input.
import { ValidationError } from "../runtime/core/errors.ts";

export type Raw = Record<string, unknown>;

export function isPlainObject(v: unknown): v is Raw {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** An optional object; undefined becomes {}. Rejects keys outside `allowed` (typos). */
export function obj(key: string, v: unknown, allowed: readonly string[]): Raw {
  if (v === undefined || v === null) return {};
  if (!isPlainObject(v)) throw new ValidationError(key, v, `use an object with keys: ${allowed.join(", ")}`);
  for (const k of Object.keys(v)) {
    if (!allowed.includes(k))
      throw new ValidationError(`${key}.${k}`, v[k], `unknown key; use one of: ${allowed.join(", ")}`);
  }
  return { ...v };
}

export function str(key: string, v: unknown, def?: string, pattern?: { re: RegExp; fix: string }): string {
  if (v === undefined || v === null) {
    if (def === undefined)
      throw new ValidationError(key, v, pattern ? `required: ${pattern.fix}` : "required: set a string");
    return def;
  }
  if (typeof v !== "string" || v.length === 0)
    throw new ValidationError(key, v, pattern?.fix ?? "use a non-empty string");
  if (pattern && !pattern.re.test(v)) throw new ValidationError(key, v, pattern.fix);
  return v;
}

export function optStr(key: string, v: unknown, pattern?: { re: RegExp; fix: string }): string | undefined {
  return v === undefined || v === null ? undefined : str(key, v, undefined, pattern);
}

export function oneOf<T extends string>(key: string, v: unknown, options: readonly T[], def: T): T {
  if (v === undefined || v === null) return def;
  if (typeof v !== "string" || !options.includes(v as T))
    throw new ValidationError(key, v, `use one of: ${options.join(", ")}`);
  return v as T;
}

export function int(key: string, v: unknown, def: number | undefined, min: number, max: number): number {
  if (v === undefined || v === null) {
    if (def === undefined) throw new ValidationError(key, v, `required: set a whole number from ${min} to ${max}`);
    return def;
  }
  if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) {
    throw new ValidationError(key, v, `use a whole number from ${min} to ${max}`);
  }
  return v;
}

export function bool(key: string, v: unknown, def: boolean): boolean {
  if (v === undefined || v === null) return def;
  if (typeof v !== "boolean") throw new ValidationError(key, v, "use true or false");
  return v;
}

export function list(key: string, v: unknown, def: unknown[] | undefined): unknown[] {
  if (v === undefined || v === null) {
    if (def === undefined) throw new ValidationError(key, v, "required: set a list");
    return [...def];
  }
  if (!Array.isArray(v)) throw new ValidationError(key, v, "use a list");
  return [...v];
}

export function strList(
  key: string,
  v: unknown,
  def: string[] | undefined,
  pattern?: { re: RegExp; fix: string },
): string[] {
  return list(key, v, def).map((item, i) => str(`${key}[${i}]`, item, undefined, pattern));
}

/** A quantity string or number such as "100m", "2", "512Mi". */
export function quantity(key: string, v: unknown, def?: string): string {
  if (v === undefined || v === null) {
    if (def === undefined) throw new ValidationError(key, v, 'required: set a quantity such as "2" or "512Mi"');
    return def;
  }
  if (typeof v === "number") return String(v);
  return str(key, v);
}
