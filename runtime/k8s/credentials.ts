// CredentialBroker: one base IAM role, narrowed per sandbox by an STS session policy at
// AssumeRole time (never a role per sandbox). The credentials reach the sandbox as a file
// written through exec, at create and at warm-claim time; they never appear in the pod spec.
import { AssumeRoleCommand, type AssumeRoleCommandOutput, STSClient, type STSClientConfig } from "@aws-sdk/client-sts";
import type { RuntimeConfig } from "../config/schema.ts";
import { UpstreamError } from "../core/errors.ts";
import { sessionPolicyJson } from "./sessionPolicy.ts";

export interface ScopedCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken: string;
  expiration: Date;
  region: string;
  bucket: string;
}

export interface CredentialBroker {
  /** short-lived credentials that can only touch this sandbox's prefix of the bucket */
  mintScoped(sandboxId: string): Promise<ScopedCredentials>;
}

export type CredentialsConfig = NonNullable<RuntimeConfig["credentials"]>;

/** Where the file lands inside the sandbox (under the writable, size-limited /tmp). */
export const CREDENTIALS_DIR = "/tmp/.sbx/aws";
export const CREDENTIALS_FILE = `${CREDENTIALS_DIR}/credentials`;

export function createStsCredentialBroker(
  cfg: CredentialsConfig,
  client?: STSClient | STSClientConfig,
): CredentialBroker {
  const sts = client instanceof STSClient ? client : new STSClient({ region: cfg.region, ...(client ?? {}) });
  return {
    async mintScoped(sandboxId) {
      const policy = sessionPolicyJson(sandboxId, cfg.bucket);
      let out: AssumeRoleCommandOutput;
      try {
        out = await sts.send(
          new AssumeRoleCommand({
            RoleArn: cfg.baseRoleArn,
            RoleSessionName: `sbx-${sandboxId}`.slice(0, 64),
            Policy: policy,
            DurationSeconds: cfg.durationSeconds,
          }),
        );
      } catch (err) {
        throw new UpstreamError(
          `STS AssumeRole on ${cfg.baseRoleArn} for sandbox ${sandboxId} failed: ${(err as Error).message}; check that the manager may assume the base role and that config.credentials.region is right`,
        );
      }
      const c = out.Credentials;
      if (!c?.AccessKeyId || !c.SecretAccessKey || !c.SessionToken || !c.Expiration) {
        throw new UpstreamError(
          `STS AssumeRole on ${cfg.baseRoleArn} for sandbox ${sandboxId} returned no credentials`,
        );
      }
      return {
        accessKeyId: c.AccessKeyId,
        secretAccessKey: c.SecretAccessKey,
        sessionToken: c.SessionToken,
        expiration: new Date(c.Expiration),
        region: cfg.region,
        bucket: cfg.bucket,
      };
    },
  };
}

/** AWS shared-credentials file content: every AWS SDK and CLI reads it. */
export function renderCredentialsFile(c: ScopedCredentials): string {
  return [
    "[default]",
    `aws_access_key_id = ${c.accessKeyId}`,
    `aws_secret_access_key = ${c.secretAccessKey}`,
    `aws_session_token = ${c.sessionToken}`,
    `region = ${c.region}`,
    "",
  ].join("\n");
}

/** Environment every exec in a credentialed sandbox gets, pointing SDKs at the file. */
export function credentialsEnv(cfg: CredentialsConfig, sandboxId: string): Record<string, string> {
  return {
    AWS_SHARED_CREDENTIALS_FILE: CREDENTIALS_FILE,
    AWS_REGION: cfg.region,
    SBX_BUCKET: cfg.bucket,
    SBX_PREFIX: `sandboxes/${sandboxId}/`,
  };
}

/** argv that atomically replaces the credentials file with stdin, readable only by the sandbox user */
export const WRITE_CREDENTIALS_ARGV = [
  "sh",
  "-c",
  `umask 077 && mkdir -p ${CREDENTIALS_DIR} && cat > ${CREDENTIALS_FILE}.new && mv -f ${CREDENTIALS_FILE}.new ${CREDENTIALS_FILE}`,
];
