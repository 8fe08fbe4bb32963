// How the runtime logs in to its snapshot registry (config.snapshots): ECR with the
// runtime's own AWS identity (the manager role the Pulumi package grants
// ecr:GetAuthorizationToken and push/pull on the snapshot repository), htpasswd with a
// username and a password file, or anonymous.
import { readFileSync } from "node:fs";
import { ECRClient, GetAuthorizationTokenCommand } from "@aws-sdk/client-ecr";
import type { RuntimeConfig } from "../config/schema.ts";
import type { Clock } from "../core/clock.ts";
import { UpstreamError, ValidationError } from "../core/errors.ts";
import { basicAuth, dynamicBasicAuth, type RegistryAuth } from "./auth.ts";
import { issuerAuth, loadTokenIssuer } from "./registryToken.ts";

const ECR_HOST = /^(\d{12})\.dkr\.ecr(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$/;

/** The AWS region of an ECR registry host, or undefined for any other registry. */
export function ecrRegionOf(registry: string): string | undefined {
  const host = registry
    .replace(/^https?:\/\//, "")
    .replace(/\/.*$/, "")
    .replace(/:\d+$/, "");
  return ECR_HOST.exec(host)?.[2];
}

/** The part of the ECR client the login needs (tests pass a fake: AWS is not reachable from CI). */
export interface EcrTokenSource {
  send(
    command: GetAuthorizationTokenCommand,
  ): Promise<{ authorizationData?: { authorizationToken?: string; expiresAt?: Date }[] }>;
}

/** ECR login: a 12-hour token from GetAuthorizationToken, fetched again 15 minutes before it expires. */
export function ecrAuth(o: {
  region: string;
  clock: Clock;
  client?: EcrTokenSource;
  refreshMarginMs?: number;
}): RegistryAuth {
  const client = o.client ?? new ECRClient({ region: o.region });
  const margin = o.refreshMarginMs ?? 15 * 60_000;
  let cached: { username: string; password: string; expiresAt: number } | undefined;
  let inflight: Promise<{ username: string; password: string }> | undefined;
  const fetchToken = async () => {
    let out: Awaited<ReturnType<EcrTokenSource["send"]>>;
    try {
      out = await client.send(new GetAuthorizationTokenCommand({}));
    } catch (err) {
      throw new UpstreamError(
        `ECR login in ${o.region} failed: ${(err as Error).message}; the runtime's role needs ecr:GetAuthorizationToken (the Pulumi Identity component grants it when snapshots are enabled)`,
      );
    }
    const data = out.authorizationData?.[0];
    const decoded = data?.authorizationToken ? Buffer.from(data.authorizationToken, "base64").toString("utf8") : "";
    const colon = decoded.indexOf(":");
    if (colon <= 0) throw new UpstreamError(`ECR login in ${o.region} returned no usable authorization token`);
    const expiresAt = data?.expiresAt ? new Date(data.expiresAt).getTime() : o.clock.now().getTime() + 12 * 3600_000;
    cached = { username: decoded.slice(0, colon), password: decoded.slice(colon + 1), expiresAt };
    return cached;
  };
  return dynamicBasicAuth(async () => {
    if (cached && cached.expiresAt - margin > o.clock.now().getTime()) return cached;
    // concurrent pushes share one login
    inflight ??= fetchToken().finally(() => (inflight = undefined));
    return inflight;
  });
}

/**
 * The login for config.snapshots: tokens the runtime signs itself, explicit htpasswd
 * credentials, else ECR by host, else anonymous.
 */
export function registryLoginFor(
  snapshots: NonNullable<RuntimeConfig["snapshots"]>,
  deps: { clock: Clock; ecrClient?: EcrTokenSource },
): RegistryAuth | undefined {
  if (snapshots.tokenAuth) return issuerAuth(loadTokenIssuer(snapshots.tokenAuth, deps.clock), snapshots.repository);
  if (snapshots.auth) {
    let password: string;
    try {
      password = readFileSync(snapshots.auth.passwordFile, "utf8").replace(/\r?\n$/, "");
    } catch (err) {
      throw new ValidationError(
        "config.snapshots.auth.passwordFile",
        snapshots.auth.passwordFile,
        `cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}); mount the registry password there or remove snapshots.auth`,
      );
    }
    return basicAuth(snapshots.auth.username, password);
  }
  const region = ecrRegionOf(snapshots.registry);
  return region ? ecrAuth({ region, clock: deps.clock, client: deps.ecrClient }) : undefined;
}
