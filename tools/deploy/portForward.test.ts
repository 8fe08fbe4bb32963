// The port-forward's own logic (reading kubectl's port, starting it again when it exits,
// stopping it) against a stand-in `kubectl`: a shell script that prints what kubectl prints.
// The real kubectl against the real control plane is what `npm run demo:k8s` runs.
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { forwardedPort, startPortForward } from "./portForward.ts";

const dir = mkdtempSync(join(tmpdir(), "sbx-pf-test-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A kubectl that logs its argv, reports the port and then lives for `lifeS` seconds. */
function fakeKubectl(name: string, lifeS: number): { bin: string; calls: () => string[] } {
  const bin = join(dir, name);
  const calls = join(dir, `${name}.calls`);
  writeFileSync(calls, "");
  writeFileSync(
    bin,
    [
      "#!/bin/sh",
      `echo "$*" >> ${calls}`,
      'last=""; for a in "$@"; do last="$a"; done',
      'local="${last%%:*}"; [ -n "$local" ] || local=43210',
      'echo "Forwarding from 127.0.0.1:$local -> 80"',
      // the second line comes as a chunk of its own, as kubectl's often does
      "sleep 0.05",
      'echo "Forwarding from [::1]:$local -> 80"',
      `exec sleep ${lifeS}`,
      "",
    ].join("\n"),
  );
  chmodSync(bin, 0o755);
  return { bin, calls: () => readFileSync(calls, "utf8").trim().split("\n").filter(Boolean) };
}

const until = async (what: string, ok: () => boolean) => {
  for (let i = 0; i < 200 && !ok(); i++) await new Promise((r) => setTimeout(r, 50));
  if (!ok()) throw new Error(`timed out waiting for ${what}`);
};

describe("forwardedPort", () => {
  it.each([
    ["Forwarding from 127.0.0.1:40187 -> 8080\n", 40187],
    ["Forwarding from [::1]:40187 -> 8080\n", undefined],
    ["Handling connection for 40187\n", undefined],
  ])("%j", (out, want) => {
    expect(forwardedPort(out)).toBe(want);
  });
});

describe("startPortForward", () => {
  const base = { kubeconfig: "/k/config", namespace: "sbx-system", target: "svc/sbx-manager", remotePort: 80 };

  it("asks kubectl for a loopback forward and reports the port it picked", async () => {
    const k = fakeKubectl("picks", 60);
    const fwd = await startPortForward({ ...base, kubectl: k.bin, log: () => undefined });
    expect(fwd.port).toBe(43210);
    expect(fwd.url).toBe("http://127.0.0.1:43210");
    expect(k.calls()).toEqual([
      "--kubeconfig=/k/config -n sbx-system port-forward --address=127.0.0.1 svc/sbx-manager :80",
    ]);
    await fwd.stop();
  });

  it("starts kubectl again on the same port when it exits, and not after stop()", async () => {
    const k = fakeKubectl("dies", 0.3);
    const lines: string[] = [];
    const fwd = await startPortForward({ ...base, kubectl: k.bin, localPort: 18080, log: (l) => lines.push(l) });
    expect(fwd.port).toBe(18080);
    await until(`a second kubectl (log: ${lines.join(" | ")})`, () => k.calls().length >= 2);
    expect(k.calls()[1]).toContain("svc/sbx-manager 18080:80");
    expect(lines[0]).toContain("the port-forward exited (code 0); starting it again on 18080");
    await fwd.stop();
    const after = k.calls().length;
    await new Promise((r) => setTimeout(r, 1_500));
    expect(k.calls().length).toBe(after);
  });

  it("a stop() between an exit and its restart starts nothing (Ctrl-C reaches kubectl too)", async () => {
    const k = fakeKubectl("interrupted", 0.05);
    const fwd = await startPortForward({ ...base, kubectl: k.bin, log: () => undefined });
    await new Promise((r) => setTimeout(r, 250)); // exited; the restart is due 500 ms after the exit
    await fwd.stop();
    await new Promise((r) => setTimeout(r, 1_500));
    expect(k.calls()).toHaveLength(1);
  });

  it("fails with kubectl's own words when it exits before forwarding", async () => {
    const bin = join(dir, "refuses");
    writeFileSync(bin, "#!/bin/sh\necho 'error: services \"sbx-manager\" not found' >&2\nexit 1\n");
    chmodSync(bin, 0o755);
    await expect(startPortForward({ ...base, kubectl: bin, log: () => undefined })).rejects.toThrow(
      'kubectl port-forward svc/sbx-manager exited (code 1): error: services "sbx-manager" not found',
    );
  });

  it("fails naming the binary when kubectl is missing", async () => {
    await expect(startPortForward({ ...base, kubectl: join(dir, "nope"), log: () => undefined })).rejects.toThrow(
      /kubectl port-forward svc\/sbx-manager (could not start \(spawn .*nope ENOENT\)|exited)/,
    );
  });
});
