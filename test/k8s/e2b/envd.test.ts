// envd through the control plane with the REAL e2b SDK on the Kubernetes backend (pods on the
// control plane the suite starts), through startService as `npm start` wires it. A smaller set
// than the local file (test/e2b/envd.test.ts): run, exit codes, envs/cwd, streamed output,
// background processes by pid, file round trips and listing, watchDir, and a wrong access token.
import { createHash, randomBytes } from "node:crypto";
import { CommandExitError, type FilesystemEvent, type Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Service } from "../../../runtime/server/service.ts";
import { type E2bOnService, startE2bSandbox } from "../runtime/service-support.ts";

let e: E2bOnService;
let service: Service;
let sbx: Sandbox;

beforeAll(async () => {
  e = await startE2bSandbox("e2b-envd");
  ({ service, sbx } = e);
}, 240_000);

afterAll(async () => {
  await e?.close();
});

const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

describe("envd with the real SDK (Kubernetes platform)", () => {
  it("commands.run: output, exit codes, envs and cwd", async () => {
    expect(await sbx.commands.run("echo out; echo err >&2")).toMatchObject({
      exitCode: 0,
      stdout: "out\n",
      stderr: "err\n",
    });
    const err = await sbx.commands.run("echo so far; exit 4").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommandExitError);
    expect(err).toMatchObject({ exitCode: 4, stdout: "so far\n" });
    const r = await sbx.commands.run('printf "%s " "$WHO"; pwd', { envs: { WHO: "k8s pod" }, cwd: "/tmp" });
    expect(r.stdout).toBe("k8s pod /tmp\n");
  });

  it("streams output before the command ends (it waits for a file the test makes)", async () => {
    const gate = `/workspace/gate-${Date.now()}`;
    let opened: Promise<unknown> | undefined;
    const seen: string[] = [];
    await sbx.commands.run(`echo first; while [ ! -e '${gate}' ]; do sleep 0.1; done; echo second`, {
      timeoutMs: 120_000,
      onStdout: (d) => {
        seen.push(d);
        if (d.includes("first") && !opened) opened = sbx.files.write(gate, "");
      },
    });
    await opened;
    expect(seen.join("")).toBe("first\nsecond\n");
  });

  it("background: list, sendStdin, connect, kill", async () => {
    const h = await sbx.commands.run("cat", { background: true, stdin: true });
    expect((await sbx.commands.list()).map((p) => p.pid)).toContain(h.pid);
    await h.disconnect();
    const out: string[] = [];
    const h2 = await sbx.commands.connect(h.pid, { onStdout: (d) => void out.push(d) });
    await sbx.commands.sendStdin(h.pid, "ping\n");
    await expect.poll(() => out.join(""), { timeout: 30_000 }).toBe("ping\n");
    expect(await sbx.commands.kill(h.pid)).toBe(true);
    await expect(h2.wait()).rejects.toBeInstanceOf(CommandExitError);
    expect(await sbx.commands.kill(h.pid)).toBe(false);
  });

  it("files: text and 1 MiB binary round trips, the array form, list/exists/makeDir/rename/remove", async () => {
    await sbx.files.write("/workspace/k8s notes.txt", "über\n");
    expect(await sbx.files.read("/workspace/k8s notes.txt")).toBe("über\n");
    const bin = randomBytes(1024 * 1024);
    await sbx.files.write("/workspace/blob.bin", bin.buffer.slice(bin.byteOffset, bin.byteOffset + bin.length));
    expect(sha256(await sbx.files.read("/workspace/blob.bin", { format: "bytes" }))).toBe(sha256(bin));

    await sbx.files.write([
      { path: "/workspace/arr/one.txt", data: "1" },
      { path: "/workspace/arr/deeper/two.txt", data: "2" },
    ]);
    expect((await sbx.files.list("/workspace/arr")).map((e) => e.name).sort()).toEqual(["deeper", "one.txt"]);
    expect(await sbx.files.makeDir("/workspace/arr/new")).toBe(true);
    expect(await sbx.files.makeDir("/workspace/arr/new")).toBe(false);
    await sbx.files.rename("/workspace/arr/one.txt", "/workspace/arr/new/one.txt");
    expect(await sbx.files.exists("/workspace/arr/one.txt")).toBe(false);
    expect(await sbx.files.read("/workspace/arr/new/one.txt")).toBe("1");
    await sbx.files.remove("/workspace/arr");
    expect(await sbx.files.exists("/workspace/arr")).toBe(false);
  });

  it("files.watchDir: create, write, rename and remove, as the SDK reports them", async () => {
    await sbx.files.makeDir("/workspace/watched");
    const events: FilesystemEvent[] = [];
    const h = await sbx.files.watchDir("/workspace/watched", (e) => void events.push(e), { timeoutMs: 0 });
    const seen = () => events.map((e) => `${e.type} ${e.name}`);
    try {
      await sbx.files.write("/workspace/watched/a.txt", "x");
      await expect.poll(seen, { timeout: 30_000 }).toEqual(["create a.txt", "write a.txt"]);
      await sbx.files.rename("/workspace/watched/a.txt", "/workspace/watched/b.txt");
      await expect.poll(() => seen().slice(2), { timeout: 30_000 }).toEqual(["rename a.txt", "create b.txt"]);
      await sbx.files.remove("/workspace/watched/b.txt");
      await expect.poll(() => seen().slice(4), { timeout: 30_000 }).toEqual(["remove b.txt"]);
    } finally {
      await h.stop();
    }
  });

  it("a wrong access token gets nothing", async () => {
    const h = { "e2b-sandbox-id": sbx.sandboxId, "x-access-token": "not-the-token" };
    const list = await fetch(`${service.url}/process.Process/List`, {
      method: "POST",
      headers: { ...h, "content-type": "application/json" },
      body: "{}",
    });
    expect(list.status).toBe(401);
    expect((await fetch(`${service.url}/files?path=/etc/hostname`, { headers: h })).status).toBe(401);
  });
});
