// The E2B lifecycle verbs on top of the Manager: create (ready before it answers, as E2B's is),
// connect (resumes a paused sandbox), and the timeout end each of them sets. Route-free, so the
// routes stay a thin table and the sweeper can share the end rules.

import type { Clock } from "../../core/clock.ts";
import { ConflictError, NotFoundError, ValidationError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { CreateRequest, Manager, MetadataPatch, Sandbox } from "../../core/types.ts";
import { ENVD_VERSION } from "./access.ts";
import { deriveAccessToken, newNonce } from "./accessToken.ts";
import { e2bState, endAtMs, RESERVED, serviceKey } from "./shape.ts";

/** E2B's default when the SDK sends no timeout (it stopped sending defaults in 2.x). */
export const DEFAULT_TIMEOUT_SECONDS = 300;

/** The Manager the layer needs: one that can change metadata after create and list across owners. */
export type E2bManager = Manager & Required<Pick<Manager, "updateMetadata" | "listMarked">>;

export interface LifecycleDeps {
  manager: E2bManager;
  clock: Clock;
  logger: Logger;
  /** the hard TTL every E2B sandbox gets; the E2B timeout end lives inside it (config.defaults.maxTtlSeconds) */
  maxTtlSeconds: number;
  /** how long create/connect wait for the sandbox to accept commands */
  readyTimeoutMs: number;
  /** host-routing domain returned to the SDK (`49983-<id>.<domain>`); absent = E2B_SANDBOX_URL mode */
  domain?: string;
}

/** The caller as the auth hook found it: owner, and the API key the access token derives from. */
export interface E2bCaller {
  owner: string;
  apiKey: string;
  /** the team the API key (a JWT) named: a create counts against it (docs/tenancy.md) */
  team?: string;
}

export interface CreateBody {
  templateID?: string;
  metadata?: Record<string, string>;
  envVars?: Record<string, string>;
  timeout?: number;
  autoPause?: boolean;
  autoPauseMemory?: boolean;
  autoResume?: { enabled?: boolean };
  secure?: boolean;
  allow_internet_access?: boolean;
  network?: unknown;
  mcp?: unknown;
  volumeMounts?: unknown;
  iam?: unknown;
}

/** What create and connect answer (the SDK reads sandboxID, envdVersion, envdAccessToken, domain). */
export interface SandboxHandle {
  sandboxID: string;
  templateID: string;
  clientID: string;
  envdVersion: string;
  envdAccessToken: string;
  trafficAccessToken: null;
  domain: string | null;
  alias?: string;
}

const UNSUPPORTED: [keyof CreateBody, string][] = [
  ["network", "sbx has no per-sandbox network policy; remove it"],
  ["mcp", "sbx does not run an MCP gateway in sandboxes; remove it"],
  ["volumeMounts", "sbx has no E2B volumes; upload files with files.write instead"],
  ["iam", "sbx does not issue workload identities; remove it"],
];

/**
 * `false` is what every sbx sandbox is (no network), so it is accepted; `true` is refused with
 * the setting that would decide it: internet access is granted by an operator-defined egress
 * policy, not by the caller.
 */
const NO_INTERNET =
  "sbx sandboxes have no internet access, and a caller cannot ask for it: an operator-defined egress policy " +
  "(the service's `egress` config, sbx:egress.policies) is what would grant it, and this service defines none; " +
  "omit allowInternetAccess or pass false";

function refuseUnsupported(b: CreateBody): void {
  for (const [field, fix] of UNSUPPORTED) if (b[field] !== undefined) throw new ValidationError(field, b[field], fix);
  if (b.allow_internet_access === true) throw new ValidationError("allow_internet_access", true, NO_INTERNET);
  if (b.autoPauseMemory === true)
    throw new ValidationError(
      "autoPauseMemory",
      true,
      "sbx pauses keep the filesystem, not memory: use onTimeout { action: 'pause', keepMemory: false }",
    );
  for (const k of Object.keys(b.metadata ?? {})) {
    const prefix = serviceKey(k);
    if (prefix) throw new ValidationError(`metadata.${k}`, k, `keys starting with ${prefix} are reserved; rename it`);
  }
}

const iso = (ms: number): string => new Date(ms).toISOString();

export class Lifecycle {
  constructor(private readonly d: LifecycleDeps) {}

  /** A sandbox E2B can see: the caller's, and neither ending nor ended (those are 404 to E2B). */
  async live(owner: string, id: string): Promise<Sandbox> {
    const s = await this.d.manager.get(owner, id);
    if (!e2bState(s.phase)) throw new NotFoundError("sandbox", id);
    return s;
  }

  checkTimeout(field: string, seconds: number): void {
    if (seconds > this.d.maxTtlSeconds)
      throw new ValidationError(
        field,
        seconds,
        `at most ${this.d.maxTtlSeconds} seconds (this service's config.defaults.maxTtlSeconds)`,
      );
  }

  async create(caller: E2bCaller, b: CreateBody): Promise<SandboxHandle> {
    refuseUnsupported(b);
    const timeout = b.timeout ?? DEFAULT_TIMEOUT_SECONDS;
    this.checkTimeout("timeout", timeout);
    const template = b.templateID ?? "base";
    const nonce = newNonce();
    const token = deriveAccessToken(caller.owner, caller.apiKey, nonce);
    const end = new Date(this.d.clock.now().getTime() + timeout * 1000).toISOString();
    const req: Omit<CreateRequest, "size"> = {
      owner: caller.owner,
      team: caller.team,
      profile: template,
      env: b.envVars,
      // the substrate's hard limit is the ceiling; the E2B end (setTimeout can move it) sits inside
      ttlSeconds: this.d.maxTtlSeconds,
      // E2B sandboxes are not reaped for idleness, only at their end
      idleTimeoutSeconds: 0,
      metadata: {
        ...b.metadata,
        [RESERVED.template]: template,
        [RESERVED.tokenHash]: token.hash,
        [RESERVED.nonce]: nonce,
        [RESERVED.end]: end,
        [RESERVED.onTimeout]: b.autoPause ? "pause" : "kill",
      },
    };
    // size: the service's default size class (resolveSpec fills it in)
    const s = await this.d.manager.create(req as CreateRequest);
    await this.ready(caller.owner, s.id, true);
    return this.handle(s, token.token);
  }

  /** Running: returned (its end moved out to `timeout` from now if that is later). Paused: resumed first. */
  async connect(
    caller: E2bCaller,
    id: string,
    timeout: number | undefined,
  ): Promise<SandboxHandle & { resumed: boolean }> {
    if (timeout !== undefined) this.checkTimeout("timeout", timeout);
    let s = await this.live(caller.owner, id);
    const resumed = e2bState(s.phase) === "paused";
    if (resumed) {
      if (!this.d.manager.resume) throw new ConflictError(`connect: this service cannot resume sandbox ${id}`);
      s = await this.d.manager.resume(caller.owner, id);
    }
    await this.ready(caller.owner, id, false);
    const now = this.d.clock.now().getTime();
    const wanted = now + (timeout ?? DEFAULT_TIMEOUT_SECONDS) * 1000;
    const { token, patch } = this.tokenFor(caller, s);
    // a resumed sandbox starts a new timeout; a running one is only ever extended by connect
    if (resumed || (timeout !== undefined && wanted > endAtMs(s))) patch[RESERVED.end] = iso(wanted);
    // one durable write for both, before the token is handed out: any replica then accepts it
    if (Object.keys(patch).length > 0) await this.d.manager.updateMetadata(caller.owner, id, patch);
    return { ...this.handle(s, token), resumed };
  }

  /** setTimeout: the end becomes `seconds` from now, shorter or longer, inside the hard TTL. */
  async setTimeout(owner: string, id: string, seconds: number, field = "timeout"): Promise<void> {
    const s = await this.live(owner, id);
    const end = this.d.clock.now().getTime() + seconds * 1000;
    const hard = Date.parse(s.expiresAt);
    if (end > hard)
      throw new ValidationError(
        field,
        seconds,
        `this sandbox ends by ${s.expiresAt} at the latest (its hard time to live); ask for at most ${Math.max(0, Math.floor((hard - this.d.clock.now().getTime()) / 1000))} seconds`,
      );
    await this.moveEnd(s, end);
  }

  /** The legacy keep-alive: extends the end to `seconds` from now, never shortens it. */
  async refresh(owner: string, id: string, seconds: number): Promise<void> {
    const s = await this.live(owner, id);
    const end = Math.min(this.d.clock.now().getTime() + seconds * 1000, Date.parse(s.expiresAt));
    if (end > endAtMs(s)) await this.moveEnd(s, end);
  }

  /**
   * The end, in the sandbox's record. A paused sandbox has no end (E2B's neither): nothing is
   * written, and connect gives it a new one when it resumes it.
   */
  private async moveEnd(s: Sandbox, endMs: number): Promise<void> {
    if (e2bState(s.phase) === "paused") return;
    await this.d.manager.updateMetadata(s.owner, s.id, { [RESERVED.end]: iso(endMs) });
  }

  /**
   * The token create handed out, derived again from the caller's key. A sandbox made through our
   * own API, or a caller with another of the owner's keys, gets one derived from the sandbox's
   * identity instead, whose hash `patch` records (it replaces an earlier connect's).
   */
  private tokenFor(caller: E2bCaller, s: Sandbox): { token: string; patch: MetadataPatch } {
    const nonce = s.metadata[RESERVED.nonce];
    if (nonce) {
      const t = deriveAccessToken(caller.owner, caller.apiKey, nonce);
      if (t.hash === s.metadata[RESERVED.tokenHash]) return { token: t.token, patch: {} };
    }
    const t = deriveAccessToken(caller.owner, caller.apiKey, `sbx:${s.id}:${s.createdAt}`);
    const patch: MetadataPatch =
      s.metadata[RESERVED.connectTokenHash] === t.hash ? {} : { [RESERVED.connectTokenHash]: t.hash };
    return { token: t.token, patch };
  }

  /** Waits until the sandbox accepts commands; a create that never gets there is not left behind. */
  private async ready(owner: string, id: string, killOnFailure: boolean): Promise<void> {
    try {
      await this.d.manager.wait(owner, id, { timeoutMs: this.d.readyTimeoutMs });
    } catch (err) {
      if (killOnFailure)
        await this.d.manager
          .kill(owner, id)
          .catch((e) =>
            this.d.logger.warn(
              { op: "e2b.create", sandbox: id, owner, err: e },
              "could not remove a sandbox that never became ready",
            ),
          );
      throw err;
    }
  }

  private handle(s: Sandbox, token: string): SandboxHandle {
    return {
      sandboxID: s.id,
      templateID: s.metadata[RESERVED.template] ?? s.profile,
      clientID: s.node ?? "sbx",
      envdVersion: ENVD_VERSION,
      envdAccessToken: token,
      trafficAccessToken: null,
      domain: this.d.domain ?? null,
    };
  }
}
