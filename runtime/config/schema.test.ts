// snapshots.podRegistry: what the schema lets pods be given (runtime/k8s/podLayers.ts), and the
// error for what it refuses names the field, the value and the fix.
import { describe, expect, it } from "vitest";
import { validateRuntimeConfig } from "./schema.ts";

const snapshots = (over: Record<string, unknown>) =>
  validateRuntimeConfig({ snapshots: { registry: "http://127.0.0.1:5000", ...over } });

describe("snapshots.podRegistry", () => {
  it("takes http://host:port, and is unset by default", () => {
    expect(snapshots({ podRegistry: "http://10.0.0.5:5000" }).snapshots?.podRegistry).toBe("http://10.0.0.5:5000");
    expect(snapshots({}).snapshots?.podRegistry).toBeUndefined();
  });

  it.each([
    ["https://10.0.0.5:5000", "https and a path are not supported yet"],
    ["http://10.0.0.5:5000/v2", "https and a path are not supported yet"],
  ])("refuses %s", (podRegistry, why) => {
    expect(() => snapshots({ podRegistry })).toThrow(why);
    expect(() => snapshots({ podRegistry })).toThrow("config.snapshots.podRegistry");
  });

  it("refuses a registry with a login: the replica's login is never handed to a sandbox", () => {
    const auth = { username: "sbx", passwordFile: "/run/secrets/registry" };
    expect(() => snapshots({ podRegistry: "http://10.0.0.5:5000", auth })).toThrow(
      /config\.snapshots\.podRegistry.*without login/,
    );
    expect(() =>
      validateRuntimeConfig({
        snapshots: { registry: "123456789012.dkr.ecr.eu-west-1.amazonaws.com", podRegistry: "http://10.0.0.5:5000" },
      }),
    ).toThrow("without login");
  });
});
