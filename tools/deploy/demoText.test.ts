import { describe, expect, it } from "vitest";
import { DEFAULT_DESTROY_TIMEOUT_S, DemoUsageError, howToUse, parseDemoArgs } from "./demoText.ts";

describe("parseDemoArgs", () => {
  it("defaults to a free port and the default destroy bound", () => {
    expect(parseDemoArgs([])).toEqual({ destroyTimeoutMs: DEFAULT_DESTROY_TIMEOUT_S * 1000, help: false });
  });

  it.each([
    [["--port", "8080"], { port: 8080 }],
    [["--port=9000"], { port: 9000 }],
    [["--destroy-timeout", "0"], { destroyTimeoutMs: 0 }],
    [["--destroy-timeout=30", "--port", "1"], { destroyTimeoutMs: 30_000, port: 1 }],
    [["--help"], { help: true }],
    [["-h"], { help: true }],
  ])("%j", (argv, want) => {
    expect(parseDemoArgs(argv)).toMatchObject(want);
  });

  it.each([
    [["--port"], "--port: a value is missing"],
    [["--port", "--help"], "--port: a value is missing"],
    [["--port", "0"], '--port: "0" is not an integer from 1 to 65535; give a free local port'],
    [["--port", "70000"], '--port: "70000" is not an integer from 1 to 65535'],
    [["--port=8o8o"], '--port: "8o8o" is not an integer'],
    [["--destroy-timeout", "-5"], '--destroy-timeout: "-5" is not an integer from 0 to 3600; give seconds'],
    [["--destroy-timeout", "1.5"], '--destroy-timeout: "1.5" is not an integer'],
    [["--keep"], 'unknown argument "--keep": the demo takes --port, --destroy-timeout and --help'],
    [["8080"], 'unknown argument "8080"'],
  ])("refuses %j naming the argument, the value and the fix", (argv, message) => {
    expect(() => parseDemoArgs(argv)).toThrow(DemoUsageError);
    expect(() => parseDemoArgs(argv)).toThrow(message);
  });

  it("shows the usage with every refusal", () => {
    expect(() => parseDemoArgs(["--nope"])).toThrow("usage: npm run demo:k8s");
  });
});

describe("howToUse", () => {
  const base = {
    url: "http://127.0.0.1:41234",
    token: "sbx_TOKEN",
    kubectl: "/repo/.cache/control-plane/v1.35.8/bin/kubectl",
    kubeconfig: "/tmp/sbx-bench-cp-x/kubeconfig",
    namespaces: { runtime: "sbx-system", sandbox: "sbx-sandboxes" },
    registry: "http://127.0.0.1:5000",
    seconds: { tools: 0.2, boot: 6.04, up: 31.5, ready: 2 },
    binDir: "/repo/node_modules/.bin",
  };

  it("prints the URL, the token, the export line, the CLI verbs and the kubectl line", () => {
    const text = howToUse(base);
    const lines = text.split("\n");
    expect(lines).toContain(
      "sbx on Kubernetes: http://127.0.0.1:41234  (a port-forward to the deployed manager Service)",
    );
    expect(lines).toContain("  sbx_TOKEN");
    expect(lines).toContain("  export SBX_SERVER=http://127.0.0.1:41234 SBX_TOKEN=sbx_TOKEN");
    expect(lines).toContain("  ID=$(npx sbx create --size nano)");
    expect(text).toContain("  npx sbx run $ID -- python3 -c");
    expect(text).toContain("  npx sbx pause $ID     # files to the registry http://127.0.0.1:5000");
    expect(lines).toContain("  npx sbx resume $ID");
    expect(lines).toContain("  npx sbx kill $ID");
    expect(lines).toContain(
      "  /repo/.cache/control-plane/v1.35.8/bin/kubectl --kubeconfig=/tmp/sbx-bench-cp-x/kubeconfig get pods -n sbx-system -o wide",
    );
    expect(text).toContain("get pods,sandboxes -n sbx-sandboxes");
    expect(text).toContain("control plane 6.0 s, pulumi up 31.5 s, both Deployments ready 2.0 s");
    expect(text).toContain('export PATH="/repo/node_modules/.bin:$PATH"');
    expect(text).toContain("Ctrl-C stops everything");
  });

  it("offers pause and resume only with a snapshot registry", () => {
    const text = howToUse({ ...base, registry: undefined });
    expect(text).not.toContain("pause");
    expect(text).not.toContain("resume");
    expect(text).toContain("npx sbx kill $ID");
  });

  it("shows the token exactly twice: once alone, once in the export line", () => {
    expect(howToUse(base).split("sbx_TOKEN")).toHaveLength(3);
  });
});
