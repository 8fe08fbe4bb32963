// What `npm run demo:k8s` accepts and what it prints: pure, so the command line and the
// copy-paste text are unit-tested without booting a control plane.

export interface DemoOptions {
  /** local port of the port-forward to the manager; undefined picks a free one */
  port?: number;
  /** how long `pulumi destroy` may take on stop before the control plane is stopped anyway */
  destroyTimeoutMs: number;
  help: boolean;
}

export const DEFAULT_DESTROY_TIMEOUT_S = 120;

export const USAGE = [
  "usage: npm run demo:k8s [-- --port N] [--destroy-timeout SECONDS]",
  "",
  "Boots the test Kubernetes control plane on this machine, deploys sbx onto it with the real",
  "Pulumi engine and forwards a loopback port to the manager. Ctrl-C stops and removes everything.",
  "",
  "  --port N                   local port for the manager (default: a free one)",
  `  --destroy-timeout SECONDS  bound on \`pulumi destroy\` at stop (default ${DEFAULT_DESTROY_TIMEOUT_S})`,
  "  --help                     this text",
].join("\n");

/** A bad command line; the message names the argument, the value and the fix. Exit code 2. */
export class DemoUsageError extends Error {
  constructor(message: string) {
    super(`${message}\n\n${USAGE}`);
    this.name = "DemoUsageError";
  }
}

function integerIn(flag: string, raw: string | undefined, min: number, max: number, fix: string): number {
  if (raw === undefined || raw.startsWith("--"))
    throw new DemoUsageError(`${flag}: a value is missing; ${fix}, e.g. ${flag} ${min === 0 ? 60 : 8080}`);
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < min || n > max)
    throw new DemoUsageError(`${flag}: "${raw.slice(0, 40)}" is not an integer from ${min} to ${max}; ${fix}`);
  return n;
}

/** Parses `--flag value` and `--flag=value`; anything else is refused by name. */
export function parseDemoArgs(argv: string[]): DemoOptions {
  const out: DemoOptions = { destroyTimeoutMs: DEFAULT_DESTROY_TIMEOUT_S * 1000, help: false };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].includes("=") ? argv[i].split(/=(.*)/s, 2) : [argv[i], undefined];
    const value = () => (inline !== undefined ? inline : argv[++i]);
    if (flag === "--help" || flag === "-h") out.help = true;
    else if (flag === "--port")
      out.port = integerIn(flag, value(), 1, 65535, "give a free local port (or leave it out for any free one)");
    else if (flag === "--destroy-timeout")
      out.destroyTimeoutMs =
        integerIn(flag, value(), 0, 3600, "give seconds (0 skips `pulumi destroy`; the cluster goes anyway)") * 1000;
    else
      throw new DemoUsageError(
        `unknown argument "${argv[i].slice(0, 40)}": the demo takes --port, --destroy-timeout and --help`,
      );
  }
  return out;
}

export interface HowToUse {
  url: string;
  token: string;
  kubectl: string;
  kubeconfig: string;
  namespaces: { runtime: string; sandbox: string };
  registry?: string;
  /** seconds per phase, shown so the evaluator sees what the wait was */
  seconds: { tools: number; boot: number; up: number; ready: number };
  /** where `sbx` can be put on the PATH (node_modules/.bin of the repo) */
  binDir: string;
}

const s = (n: number) => `${n.toFixed(1)} s`;

export function howToUse(h: HowToUse): string {
  const kubectl = `${h.kubectl} --kubeconfig=${h.kubeconfig}`;
  return [
    "",
    `sbx on Kubernetes: ${h.url}  (a port-forward to the deployed manager Service)`,
    `  tools ${s(h.seconds.tools)}, control plane ${s(h.seconds.boot)}, pulumi up ${s(h.seconds.up)}, ` +
      `both Deployments ready ${s(h.seconds.ready)}`,
    "token (shown once; the cluster stores only its sha256, in the Secret sbx-api-tokens):",
    `  ${h.token}`,
    "",
    "try it:",
    `  export SBX_SERVER=${h.url} SBX_TOKEN=${h.token}`,
    "  ID=$(npx sbx create --size nano)",
    "  npx sbx run $ID -- python3 -c 'print(\"hello from a sandbox pod\")'",
    ...(h.registry
      ? [`  npx sbx pause $ID     # files to the registry ${h.registry}, the pod is deleted`, "  npx sbx resume $ID"]
      : []),
    "  npx sbx kill $ID",
    `  (npx costs about a second per call; for loops: export PATH="${h.binDir}:$PATH")`,
    "",
    "look at the pods:",
    `  ${kubectl} get pods -n ${h.namespaces.runtime} -o wide`,
    `  ${kubectl} get pods,sandboxes -n ${h.namespaces.sandbox}`,
    "",
    `API description: ${h.url}/openapi.json   metrics: ${h.url}/metrics`,
    "Ctrl-C stops everything: the port-forward, `pulumi destroy`, the control plane (Ctrl-C again skips the destroy).",
    "",
  ].join("\n");
}

/** The first-run notice, printed before the tools script, with the build times we measured. */
export const FIRST_RUN_NOTICE =
  "sbx demo: checking the tools (scripts/ensure-tools.sh). A first run builds the Kubernetes control plane " +
  "(about 12 min on 2 cores) and the Pulumi engine (CLI about 5 min, provider about 18 min), both cached " +
  "afterwards; later runs take under a second.";
