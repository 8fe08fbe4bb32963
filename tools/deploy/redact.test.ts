import { describe, expect, it } from "vitest";
import { LineBuffer, makeRedactor, REDACTED } from "./redact.ts";

const kubeconfig = [
  "apiVersion: v1",
  "clusters:",
  "- cluster:",
  "    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t",
  "    server: https://127.0.0.1:41234",
  "users:",
  "- user:",
  '    token: "0123456789abcdef0123"',
].join("\n");

describe("makeRedactor", () => {
  const redact = makeRedactor([kubeconfig, "a".repeat(64)]);

  it.each([
    ["a whole secret", `x ${"a".repeat(64)} y`, `x ${REDACTED} y`],
    ["one line of a multi-line secret", "data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t", `data: ${REDACTED}`],
    ["a field value quoted as JSON", '{"token":"0123456789abcdef0123"}', `{"token":"${REDACTED}"}`],
    ["every occurrence", `${"a".repeat(64)}/${"a".repeat(64)}`, `${REDACTED}/${REDACTED}`],
  ])("scrubs %s", (_what, input, want) => {
    expect(redact(input)).toBe(want);
  });

  it("leaves short, common fragments alone", () => {
    expect(redact("apiVersion: v1 created")).toBe("apiVersion: v1 created");
  });
});

describe("LineBuffer", () => {
  it("hands over whole lines only, so a secret split across chunks is seen whole", () => {
    const redact = makeRedactor(["s3cr3t-token-value"]);
    const b = new LineBuffer();
    const out = [...b.push("one s3cr3t-"), ...b.push("token-value two\nthree"), ...b.flush()].map(redact);
    expect(out).toEqual([`one ${REDACTED} two\n`, "three"]);
  });
});
