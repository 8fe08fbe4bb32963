// sbx:auth: the JWT issuers the runtime accepts, and the cluster's own service-account issuer.
// Pure. Issuer entries are the runtime's auth.issuers entries and are validated with the
// runtime's own schema (so what preview accepts the runtime accepts), the error renamed to the
// stack key. In eks mode the cluster issuer is on by default: the URL comes from the cluster.

import type { AuthSettings, PlatformConfig } from "../components/shared/platformConfig.ts";
import { validateRuntimeConfig } from "../runtime/config/schema.ts";
import { SbxError, ValidationError } from "../runtime/core/errors.ts";
import { bool, isPlainObject, list, obj, str, strList } from "./readers.ts";

const KEY = "sbx:auth";

export function readAuth(v: unknown, mode: PlatformConfig["mode"]): AuthSettings {
  const raw = v === undefined ? {} : obj(KEY, v, ["issuers", "clusterIssuer"]);
  const issuers = list(`${KEY}.issuers`, raw.issuers, []).map((entry, i) => {
    if (!isPlainObject(entry))
      throw new ValidationError(`${KEY}.issuers[${i}]`, entry, "each issuer is an object (docs/identity.md)");
    return entry;
  });
  try {
    validateRuntimeConfig({ auth: { issuers } });
  } catch (err) {
    if (!(err instanceof SbxError) || typeof err.details.field !== "string") throw err;
    const field = err.details.field.replace(/^config\.auth/, KEY);
    throw new SbxError("validation", err.message.replace(err.details.field, field), { ...err.details, field });
  }
  const clusterIssuer = readClusterIssuer(raw.clusterIssuer, mode, issuers);
  return clusterIssuer ? { issuers, clusterIssuer } : { issuers };
}

function readClusterIssuer(
  v: unknown,
  mode: PlatformConfig["mode"],
  issuers: Record<string, unknown>[],
): AuthSettings["clusterIssuer"] {
  const key = `${KEY}.clusterIssuer`;
  const raw = v === undefined ? {} : obj(key, v, ["enabled", "name", "audiences", "issuer"]);
  if (!bool(`${key}.enabled`, raw.enabled, mode === "eks")) return undefined;
  const name = str(`${key}.name`, raw.name, "cluster");
  if (issuers.some((i) => i.name === name))
    throw new ValidationError(`${key}.name`, name, "an entry of sbx:auth.issuers has this name; choose another");
  const audiences = strList(`${key}.audiences`, raw.audiences, ["sbx"]);
  if (audiences.length === 0)
    throw new ValidationError(
      `${key}.audiences`,
      audiences,
      'give the audience agents request tokens for, e.g. ["sbx"]',
    );
  if (mode === "eks") {
    if (raw.issuer !== undefined)
      throw new ValidationError(`${key}.issuer`, raw.issuer, "eks mode reads the issuer from the cluster; remove it");
    return { name, audiences };
  }
  const issuer = str(`${key}.issuer`, raw.issuer, undefined);
  return { name, audiences, issuer };
}
