// Manifests and host-side checks for real-pods.test.ts: pods on the real node (sbx-system-0),
// which sbx-kubelet runs itself (docs/control-plane.md, "Pods on the real nodes").
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { V1Container, V1Pod, V1PodSpec } from "@kubernetes/client-node";
import { inject } from "vitest";

export const PORT = 8080;

/**
 * A node http server: / serves /opt/app/index.html (written by an init container), /healthz
 * fails while /tmp/sick exists (removed at start, so a restart heals it), /ready fails while
 * /tmp/notready exists.
 */
export const SERVER = `
const fs = require("fs");
fs.rmSync("/tmp/sick", { force: true });
require("http").createServer((req, res) => {
  const bad = (f) => fs.existsSync(f);
  if (req.url === "/healthz") return res.writeHead(bad("/tmp/sick") ? 500 : 200).end("h");
  if (req.url === "/ready") return res.writeHead(bad("/tmp/notready") ? 503 : 200).end("r");
  res.end(fs.readFileSync("/opt/app/index.html"));
}).listen(${PORT}, () => console.log("listening as " + process.env.POD_NAME));
`;

export function serverContainer(extra: Partial<V1Container> = {}): V1Container {
  return {
    name: "main",
    image: "sbx.local/ignored:1",
    command: ["node", "-e", SERVER],
    ports: [{ name: "http", containerPort: PORT }],
    env: [{ name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } }],
    volumeMounts: [{ name: "web", mountPath: "/opt/app", readOnly: true }],
    ...extra,
  };
}

/** A pod spec on the system node, with the emptyDir the init container writes into. */
export function realSpec(spec: Partial<V1PodSpec>): V1PodSpec {
  return {
    nodeSelector: { "sbx.dev/node-role": "system" },
    terminationGracePeriodSeconds: 2,
    containers: [],
    ...spec,
    volumes: [{ name: "web", emptyDir: {} }, ...(spec.volumes ?? [])],
  };
}

/** An init container that writes /opt/app/index.html with sh (image ignored: host tools). */
export function writeIndexInit(script: string): V1Container {
  return {
    name: "write-index",
    image: "sbx.local/ignored:1",
    command: ["sh", "-c", script],
    volumeMounts: [{ name: "web", mountPath: "/opt/app" }],
  };
}

export function podDoc(name: string, spec: V1PodSpec): V1Pod {
  return { apiVersion: "v1", kind: "Pod", metadata: { name }, spec };
}

export async function httpText(url: string): Promise<{ status: number; body: string }> {
  const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
  return { status: res.status, body: await res.text() };
}

/** `kubectl port-forward pod/x :port`; resolves the local port, and a stop(). */
export function portForward(ns: string, pod: string, port: number): Promise<{ local: number; stop: () => void }> {
  const bin = join(inject("controlPlaneBin"), "kubectl");
  const child = spawn(bin, [
    `--kubeconfig=${inject("kubeconfigPath")}`,
    "-n",
    ns,
    "port-forward",
    `pod/${pod}`,
    `:${port}`,
  ]);
  let out = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`port-forward did not start: ${out}`)), 30_000);
    child.on("error", reject);
    child.stderr.on("data", (c: Buffer) => (out += c.toString()));
    child.stdout.on("data", (c: Buffer) => {
      out += c.toString();
      const m = /Forwarding from 127\.0\.0\.1:(\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ local: Number(m[1]), stop: () => child.kill("SIGTERM") });
      }
    });
    child.on("close", (code) => reject(new Error(`port-forward exited ${code}: ${out}`)));
  });
}

/** What a real pod leaves on the host, by UID: its namespace, veth, processes, mounts, dir. */
export function hostTraces(uid: string): string[] {
  const traces: string[] = [];
  const netns = spawnSync("ip", ["netns", "list"], { encoding: "utf8" }).stdout;
  if (netns.includes(uid)) traces.push(`netns ${netns.split("\n").find((l) => l.includes(uid))}`);
  const veth = `sv${createHash("sha256").update(uid).digest("hex").slice(0, 12)}`;
  if (spawnSync("ip", ["link", "show", veth]).status === 0) traces.push(`veth ${veth}`);
  const podDir = join(inject("podsDir"), uid);
  for (const pid of readdirSync("/proc").filter((e) => /^\d+$/.test(e))) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(podDir)) traces.push(`process ${pid}`);
    } catch {
      // exited meanwhile
    }
  }
  for (const line of readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
    if (line.includes(uid)) traces.push(`mount ${line}`);
  }
  if (existsSync(podDir)) traces.push(`dir ${podDir}`);
  return traces;
}
