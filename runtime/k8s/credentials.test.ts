// The broker against a local fake STS endpoint on loopback (AWS is unreachable here): the
// real AWS SDK client signs and sends a real AssumeRole request; we assert what it sent.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { STSClient } from "@aws-sdk/client-sts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createStsCredentialBroker, credentialsEnv, renderCredentialsFile } from "./credentials.ts";
import { sessionPolicyJson } from "./sessionPolicy.ts";

let server: Server;
let endpoint: string;
const requests: URLSearchParams[] = [];
let fail = false;

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const params = new URLSearchParams(body);
      requests.push(params);
      if (fail) {
        res.writeHead(403, { "content-type": "text/xml" });
        return res.end(
          `<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>not allowed to assume ${params.get("RoleArn")}</Message></Error><RequestId>r</RequestId></ErrorResponse>`,
        );
      }
      res.writeHead(200, { "content-type": "text/xml" });
      res.end(`<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleResult>
<Credentials><AccessKeyId>ASIAFAKE</AccessKeyId><SecretAccessKey>secret</SecretAccessKey><SessionToken>token-${params.get("RoleSessionName")}</SessionToken><Expiration>2030-01-01T00:15:00Z</Expiration></Credentials>
<AssumedRoleUser><AssumedRoleId>AROA:x</AssumedRoleId><Arn>arn:aws:sts::123456789012:assumed-role/base/x</Arn></AssumedRoleUser>
</AssumeRoleResult><ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></AssumeRoleResponse>`);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

const cfg = {
  baseRoleArn: "arn:aws:iam::123456789012:role/sbx-base",
  bucket: "sbx-data",
  region: "eu-west-1",
  durationSeconds: 900,
};
const client = () =>
  new STSClient({ region: cfg.region, endpoint, credentials: { accessKeyId: "AKIAMANAGER", secretAccessKey: "x" } });

describe("STS credential broker", () => {
  it("assumes the base role with the sandbox's session policy and returns short-lived credentials", async () => {
    const broker = createStsCredentialBroker(cfg, client());
    const creds = await broker.mintScoped("sb-42");
    const sent = requests.at(-1)!;
    expect(sent.get("Action")).toBe("AssumeRole");
    expect(sent.get("RoleArn")).toBe(cfg.baseRoleArn);
    expect(sent.get("RoleSessionName")).toBe("sbx-sb-42");
    expect(sent.get("DurationSeconds")).toBe("900");
    const policy = JSON.parse(sent.get("Policy")!);
    expect(policy).toEqual(JSON.parse(sessionPolicyJson("sb-42", "sbx-data")));
    expect(JSON.stringify(policy)).toContain("arn:aws:s3:::sbx-data/sandboxes/sb-42/*");
    expect(JSON.stringify(policy)).not.toContain("sandboxes/sb-43");
    expect(creds).toMatchObject({
      accessKeyId: "ASIAFAKE",
      sessionToken: "token-sbx-sb-42",
      region: "eu-west-1",
      bucket: "sbx-data",
    });
    expect(creds.expiration.toISOString()).toBe("2030-01-01T00:15:00.000Z");
  });

  it("names the role and the fix when STS refuses", async () => {
    fail = true;
    try {
      await expect(createStsCredentialBroker(cfg, client()).mintScoped("sb-1")).rejects.toThrow(
        /STS AssumeRole on arn:aws:iam::123456789012:role\/sbx-base for sandbox sb-1 failed: not allowed.*check that the manager may assume the base role/,
      );
    } finally {
      fail = false;
    }
  });

  it("renders a shared-credentials file and the env that points SDKs at it", () => {
    const file = renderCredentialsFile({
      accessKeyId: "A",
      secretAccessKey: "S",
      sessionToken: "T",
      expiration: new Date(),
      region: "r",
      bucket: "b",
    });
    expect(file).toBe(
      "[default]\naws_access_key_id = A\naws_secret_access_key = S\naws_session_token = T\nregion = r\n",
    );
    expect(credentialsEnv(cfg, "sb-1")).toEqual({
      AWS_SHARED_CREDENTIALS_FILE: "/tmp/.sbx/aws/credentials",
      AWS_REGION: "eu-west-1",
      SBX_BUCKET: "sbx-data",
      SBX_PREFIX: "sandboxes/sb-1/",
    });
  });
});
