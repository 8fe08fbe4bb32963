// The runtime bundle carries the in-sandbox helper for pods' command channels
// (components/runtime/bundle.ts; runtime/k8s/channel/embedded.ts reads it back): a deployed
// manager pod has neither the helper's sources nor a compiler.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { gunzipSync } from "node:zlib";
import { expect, it } from "vitest";
import { bundleRuntime, joinBundleParts } from "../../components/runtime/bundle.ts";
import { EMBEDDED_HELPER_GLOBAL, embeddedHelper } from "../../runtime/k8s/channel/embedded.ts";
import { HELPER_BINARY } from "../../runtime/local/helperBinary.ts";

const FIXTURE_ENTRY = fileURLToPath(new URL("./fixtures/entry.ts", import.meta.url));

it("the bundle carries the in-sandbox helper, which the bundled runtime finds and copies into pods", () => {
  const bundle = bundleRuntime(FIXTURE_ENTRY);
  const onDisk = createHash("sha256").update(readFileSync(HELPER_BINARY)).digest("hex");
  expect(bundle.helperMissing).toBeUndefined();
  expect(bundle.helperSha256).toBe(onDisk);
  const code = gunzipSync(joinBundleParts(bundle)).toString("utf8");
  const carried = /globalThis\.__sbxHelperGz="([A-Za-z0-9+/=]+)"/.exec(code)?.[1];
  expect(carried, "the banner sets the helper's global").toBeDefined();
  // what runtime/k8s/channel/embedded.ts reads from that global in the bundled runtime
  const g = globalThis as Record<string, unknown>;
  g[EMBEDDED_HELPER_GLOBAL] = carried;
  try {
    expect(embeddedHelper()?.sha256).toBe(onDisk);
  } finally {
    delete g[EMBEDDED_HELPER_GLOBAL];
  }
  // a machine that cannot build the helper still bundles, and says why pods will exec instead
  const without = bundleRuntime(FIXTURE_ENTRY, { missing: "gcc not found" });
  expect(without.helperMissing).toBe("gcc not found");
  expect(gunzipSync(joinBundleParts(without)).toString("utf8")).not.toContain("__sbxHelperGz");
}, 60_000);
