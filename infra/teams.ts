// `sbx:tenancy`: teams, their quotas and guarantees (docs/tenancy.md), read with the runtime's own
// schema and resolution (runtime/config/tenancy.ts through schema.ts, shared with the runtime),
// so a stack the runtime would refuse fails at preview, naming the stack key. What is returned
// is the validated input, written as is into the runtime's config.json.
import { resolveTenancy, type TenancyInput, tenancyInput } from "../runtime/config/schema.ts";
import { ValidationError } from "../runtime/core/errors.ts";
import { parseCpu, parseMemory } from "../runtime/core/quantity.ts";

const KEY = "sbx:tenancy";

export function readTenancy(v: unknown, budget: { cpu: string; memory: string }): TenancyInput | undefined {
  if (v === undefined || v === null) return undefined;
  const parsed = tenancyInput.safeParse(v);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const path = issue.path.map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join("");
    throw new ValidationError(`${KEY}${path}`, valueAt(v, issue.path), issue.message);
  }
  resolveTenancy(
    parsed.data,
    { cpuMillis: parseCpu("sbx:budget.cpu", budget.cpu), memoryBytes: parseMemory("sbx:budget.memory", budget.memory) },
    KEY,
  );
  return parsed.data;
}

function valueAt(input: unknown, path: PropertyKey[]): unknown {
  let v: unknown = input;
  for (const p of path) v = v && typeof v === "object" ? (v as Record<PropertyKey, unknown>)[p] : undefined;
  return v;
}
