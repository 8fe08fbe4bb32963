// Pods on the real node (sbx-system-0) are run by sbx-kubelet itself, not played by kwok:
// real processes in their own network namespace, volumes, env, init containers, probes,
// restarts, port-forward and the API server's pod proxy. See docs/control-plane.md.
import { existsSync } from "node:fs";
import { AppsV1Api, CoreV1Api, RbacAuthorizationV1Api, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createNamespace,
  execInPod,
  kubectl,
  loadKubeConfig,
  type TestNamespace,
  waitFor,
  waitForPod,
} from "../../support/cluster.ts";
import {
  hostTraces,
  httpText,
  PORT,
  podDoc,
  portForward,
  realSpec,
  SERVER,
  serverContainer,
  writeIndexInit,
} from "./real-pods.fixtures.ts";

const kc = loadKubeConfig();
const core = kc.makeApiClient(CoreV1Api);
const apps = kc.makeApiClient(AppsV1Api);
let ns: TestNamespace;

const ready = (p: V1Pod) => !!p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");

beforeAll(async () => {
  ns = await createNamespace(kc, "real");
  await core.createNamespacedConfigMap({
    namespace: ns.name,
    body: {
      metadata: { name: "web-config" },
      data: { greeting: "hello-from-configmap", "app.json": '{"x":1}' },
      binaryData: { "blob.bin": Buffer.from([0, 1, 2, 255]).toString("base64") },
    },
  });
  await core.createNamespacedSecret({
    namespace: ns.name,
    body: { metadata: { name: "web-secret" }, stringData: { token: "s3cret-value" } },
  });
});

afterAll(async () => {
  await ns?.delete();
});

describe("a Deployment on the real node", () => {
  const labels = { app: "web" };
  let pods: V1Pod[] = [];

  beforeAll(async () => {
    // /opt and /etc are the host's, read-only: the mounts under them need the shadow tmpfs.
    const index =
      'echo "pod=$POD_NAME ns=$POD_NS ip=$POD_IP sa=$SA greeting=$GREETING token=$TOKEN" > /opt/app/index.html';
    const spec = realSpec({
      serviceAccountName: "default",
      initContainers: [
        {
          ...writeIndexInit(index),
          env: [
            { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
            { name: "POD_NS", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
            { name: "POD_IP", valueFrom: { fieldRef: { fieldPath: "status.podIP" } } },
            { name: "SA", valueFrom: { fieldRef: { fieldPath: "spec.serviceAccountName" } } },
            { name: "GREETING", valueFrom: { configMapKeyRef: { name: "web-config", key: "greeting" } } },
            { name: "TOKEN", valueFrom: { secretKeyRef: { name: "web-secret", key: "token" } } },
            { name: "NOPE", valueFrom: { secretKeyRef: { name: "missing", key: "x", optional: true } } },
          ],
        },
      ],
      containers: [
        serverContainer({
          readinessProbe: { httpGet: { path: "/ready", port: "http" }, periodSeconds: 1 },
          workingDir: "/etc/sbx-test",
          volumeMounts: [
            { name: "web", mountPath: "/opt/app", readOnly: true },
            { name: "config", mountPath: "/etc/sbx-test/config", readOnly: true },
            { name: "secret", mountPath: "/etc/sbx-test/secret", readOnly: true },
          ],
        }),
      ],
      volumes: [
        {
          name: "config",
          configMap: {
            name: "web-config",
            items: [
              { key: "app.json", path: "conf/app.json" },
              { key: "blob.bin", path: "blob.bin", mode: 0o600 },
            ],
          },
        },
        { name: "secret", secret: { secretName: "web-secret", defaultMode: 0o440 } },
      ],
    });
    await apps.createNamespacedDeployment({
      namespace: ns.name,
      body: {
        metadata: { name: "web" },
        spec: { replicas: 2, selector: { matchLabels: labels }, template: { metadata: { labels }, spec } },
      },
    });
    await waitFor("the web Deployment to have 2 available replicas", async () => {
      const d = await apps.readNamespacedDeployment({ name: "web", namespace: ns.name });
      return d.status?.availableReplicas === 2;
    });
    pods = (await core.listNamespacedPod({ namespace: ns.name, labelSelector: "app=web" })).items;
  });

  it("runs both replicas on their own address, each listening on the same port", async () => {
    expect(pods).toHaveLength(2);
    const ips = pods.map((p) => p.status!.podIP!);
    expect(new Set(ips).size).toBe(2);
    for (const p of pods) {
      expect(p.spec!.nodeName).toBe("sbx-system-0");
      expect(p.status!.podIP).toMatch(/^10\.244\.2[0-4]\d\.\d+$/);
      expect(p.status!.podIPs).toEqual([{ ip: p.status!.podIP }]);
      expect(p.status!.hostIP).toBe("127.0.0.1");
      const init = p.status!.initContainerStatuses![0]!;
      expect(init.state?.terminated).toMatchObject({ exitCode: 0, reason: "Completed" });
      const main = p.status!.containerStatuses![0]!;
      expect(main).toMatchObject({ ready: true, started: true, restartCount: 0 });
      expect(main.state?.running?.startedAt).toBeTruthy();
      const types = Object.fromEntries((p.status!.conditions ?? []).map((c) => [c.type, c.status]));
      expect(types).toMatchObject({
        Initialized: "True",
        ContainersReady: "True",
        Ready: "True",
        PodScheduled: "True",
      });
      // the init container's file, with every valueFrom resolved, served by the main process
      const page = await httpText(`http://${p.status!.podIP}:${PORT}/`);
      expect(page.body.trim()).toBe(
        `pod=${p.metadata!.name} ns=${ns.name} ip=${p.status!.podIP} sa=default greeting=hello-from-configmap token=s3cret-value`,
      );
    }
  });

  it("materializes ConfigMap and Secret volumes with items, modes and readOnly", async () => {
    const pod = pods[0]!.metadata!.name!;
    const run = (cmd: string) => execInPod(kc, ns.name, pod, ["sh", "-c", cmd]);
    const files = await run(
      "pwd; cat config/conf/app.json; echo; od -An -tu1 config/blob.bin; stat -c '%a %n' config/blob.bin secret/token; cat secret/token",
    );
    expect(files.exitCode).toBe(0);
    expect(
      files.stdout
        .toString()
        .split("\n")
        .map((l) => l.trim()),
    ).toEqual(["/etc/sbx-test", '{"x":1}', "0   1   2 255", "600 config/blob.bin", "440 secret/token", "s3cret-value"]);
    const write = await run("touch /etc/sbx-test/config/new 2>&1; echo rc=$?; touch /opt/app/x 2>&1; echo rc=$?");
    expect(write.stdout.toString()).toMatch(/Read-only file system\nrc=1\n.*Read-only file system\nrc=1/s);
    // the host is untouched: the shadowed /etc and /opt exist only inside the pod
    expect(existsSync("/etc/sbx-test") || existsSync("/opt/app")).toBe(false);
  });

  it("gives the pod a working in-cluster config: token, CA, namespace and KUBERNETES_SERVICE_*", async () => {
    const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
    await rbac.createNamespacedRole({
      namespace: ns.name,
      body: { metadata: { name: "pod-reader" }, rules: [{ apiGroups: [""], resources: ["pods"], verbs: ["list"] }] },
    });
    await rbac.createNamespacedRoleBinding({
      namespace: ns.name,
      body: {
        metadata: { name: "pod-reader" },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "pod-reader" },
        subjects: [{ kind: "ServiceAccount", name: "default", namespace: ns.name }],
      },
    });
    const pod = pods[0]!.metadata!.name!;
    // what client-node's loadFromCluster reads, read the same way with Node's own https: the pod
    // sees the host's root but its own /tmp, so a checkout under /tmp (CI's clone) is not visible
    const script = `
      import { readFileSync } from "node:fs";
      import { request } from "node:https";
      const sa = "/var/run/secrets/kubernetes.io/serviceaccount";
      const namespace = readFileSync(sa + "/namespace", "utf8");
      const host = process.env.KUBERNETES_SERVICE_HOST, port = process.env.KUBERNETES_SERVICE_PORT;
      const server = "https://" + host + ":" + port;
      const req = request(server + "/api/v1/namespaces/" + namespace + "/pods", {
        ca: readFileSync(sa + "/ca.crt"),
        headers: { authorization: "Bearer " + readFileSync(sa + "/token", "utf8").trim() },
      }, (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (d) => (body += d));
        res.on("end", () => {
          if (res.statusCode !== 200) { console.error(res.statusCode, body); process.exit(1); }
          const names = JSON.parse(body).items.map((p) => p.metadata.name).sort().join(",");
          console.log(server, names);
        });
      });
      req.on("error", (e) => { console.error(e.message); process.exit(1); });
      req.end();`;
    const r = await execInPod(kc, ns.name, pod, ["node", "--input-type=module", "-e", script]);
    expect(r.stderr).toBe("");
    const [server, names] = r.stdout.toString().trim().split(" ");
    expect(server).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(names).toBe(
      pods
        .map((p) => p.metadata!.name)
        .sort()
        .join(","),
    );
  });

  it("reaches a pod's port through kubectl port-forward and the API server's pod proxy", async () => {
    const pod = pods[1]!;
    const fwd = await portForward(ns.name, pod.metadata!.name!, PORT);
    try {
      const page = await httpText(`http://127.0.0.1:${fwd.local}/`);
      expect(page.body).toContain(`pod=${pod.metadata!.name} `);
    } finally {
      fwd.stop();
    }
    const proxied = await kubectl([
      "get",
      "--raw",
      `/api/v1/namespaces/${ns.name}/pods/${pod.metadata!.name}:${PORT}/proxy/`,
    ]);
    expect(proxied.stderr).toBe("");
    expect(proxied.stdout.toString()).toContain(`pod=${pod.metadata!.name} `);
  });

  it("gates Ready on the readiness probe", async () => {
    const pod = pods[0]!.metadata!.name!;
    await execInPod(kc, ns.name, pod, ["touch", "/tmp/notready"]);
    const notReady = await waitForPod(kc, ns.name, pod, (p) => !ready(p));
    expect(notReady.status!.containerStatuses![0]).toMatchObject({ ready: false, restartCount: 0 });
    await execInPod(kc, ns.name, pod, ["rm", "/tmp/notready"]);
    await waitForPod(kc, ns.name, pod, ready);
  });

  it("leaves no namespace, veth, process, mount or directory behind once a pod is deleted", async () => {
    const uid = pods[0]!.metadata!.uid!;
    expect(hostTraces(uid).length).toBeGreaterThan(0); // the check sees a live pod
    await apps.deleteNamespacedDeployment({ name: "web", namespace: ns.name });
    await waitFor("the web pods to be deleted", async () => {
      const left = await core.listNamespacedPod({ namespace: ns.name, labelSelector: "app=web" });
      return left.items.length === 0;
    });
    for (const p of pods) expect(hostTraces(p.metadata!.uid!)).toEqual([]);
  });
});

describe("restarts on the real node", () => {
  it("restarts a container whose liveness probe fails, counting it", async () => {
    const spec = realSpec({
      initContainers: [writeIndexInit("echo ok > /opt/app/index.html")],
      containers: [
        serverContainer({
          // a server slow to start, as node is on a loaded machine: liveness alone (2 × 1 s) kills
          // each run before it listens, a restart loop that never serves; the startup probe holds
          // liveness off until it does
          command: ["sh", "-c", `sleep 3; exec node -e "$0"`, SERVER],
          startupProbe: { httpGet: { path: "/healthz", port: PORT }, periodSeconds: 1, failureThreshold: 120 },
          livenessProbe: { httpGet: { path: "/healthz", port: PORT }, periodSeconds: 1, failureThreshold: 2 },
        }),
      ],
    });
    await core.createNamespacedPod({ namespace: ns.name, body: podDoc("live", spec) });
    await waitForPod(kc, ns.name, "live", ready);
    await execInPod(kc, ns.name, "live", ["touch", "/tmp/sick"]);
    const restarted = await waitForPod(
      kc,
      ns.name,
      "live",
      (p) => (p.status?.containerStatuses?.[0]?.restartCount ?? 0) >= 1 && ready(p),
    );
    const st = restarted.status!.containerStatuses![0]!;
    expect(st.lastState?.terminated?.exitCode).toBeGreaterThan(0);
    expect(st.state?.running).toBeTruthy();
    // the new run serves again (it removed the sick flag at start); Ready without a readiness
    // probe means started, not listening yet, so the connect is retried
    await waitFor("the restarted container serves /healthz", async () => {
      const r = await httpText(`http://${restarted.status!.podIP}:${PORT}/healthz`).catch(() => undefined);
      return r?.status === 200;
    });
  });

  it("restarts an exited container with back-off (restartPolicy Always) and keeps the previous log", async () => {
    const spec = realSpec({
      containers: [{ name: "main", image: "x", command: ["sh", "-c", "echo run-$(date +%s%N); exit 3"] }],
    });
    await core.createNamespacedPod({ namespace: ns.name, body: podDoc("crash", spec) });
    const p = await waitForPod(kc, ns.name, "crash", (x) => (x.status?.containerStatuses?.[0]?.restartCount ?? 0) >= 2);
    const st = p.status!.containerStatuses![0]!;
    expect(st.lastState?.terminated).toMatchObject({ exitCode: 3, reason: "Error" });
    expect(p.status!.phase).toBe("Running");
    expect(ready(p)).toBe(false);
    const prev = await kubectl(["-n", ns.name, "logs", "crash", "--previous"]);
    expect(prev.stdout.toString()).toMatch(/^run-\d+\n$/);
  });

  it("retries a failing init container, reports it, then starts the main container", async () => {
    // fails on its first run, succeeds on the second: the emptyDir keeps the marker
    const spec = realSpec({
      initContainers: [
        writeIndexInit(
          "if [ -e /opt/app/tried ]; then echo second > /opt/app/index.html; else touch /opt/app/tried; exit 7; fi",
        ),
      ],
      containers: [serverContainer()],
    });
    await core.createNamespacedPod({ namespace: ns.name, body: podDoc("init-retry", spec) });
    const p = await waitForPod(kc, ns.name, "init-retry", ready);
    const init = p.status!.initContainerStatuses![0]!;
    expect(init.restartCount).toBe(1);
    expect(init.lastState?.terminated).toMatchObject({ exitCode: 7, reason: "Error" });
    expect(init.state?.terminated).toMatchObject({ exitCode: 0, reason: "Completed" });
    // Ready without a readiness probe means started, not listening yet: retry the connect
    let page = "";
    await waitFor("the main container serves", async () => {
      page = (await httpText(`http://${p.status!.podIP}:${PORT}/`).catch(() => ({ body: "" }))).body;
      return page !== "";
    });
    expect(page).toBe("second\n");
  });

  it("expands $(VAR) in args from the container's env", async () => {
    const spec = realSpec({
      restartPolicy: "Never",
      containers: [
        {
          name: "main",
          image: "x",
          command: ["echo"],
          args: ["$(GREETING)", "$$(GREETING)", "$(UNSET)", "a$(GREETING)b"],
          env: [{ name: "GREETING", valueFrom: { configMapKeyRef: { name: "web-config", key: "greeting" } } }],
        },
      ],
    });
    await core.createNamespacedPod({ namespace: ns.name, body: podDoc("expand", spec) });
    const p = await waitForPod(kc, ns.name, "expand", (x) => x.status?.phase === "Succeeded");
    expect(p.status!.containerStatuses![0]!.state?.terminated?.exitCode).toBe(0);
    const log = await kubectl(["-n", ns.name, "logs", "expand"]);
    expect(log.stdout.toString()).toBe("hello-from-configmap $(GREETING) $(UNSET) ahello-from-configmapb\n");
  });
});
