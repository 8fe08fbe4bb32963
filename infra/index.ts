// Pulumi entry point (Pulumi.yaml `main`). Stack outputs are this module's exports.
import { fileURLToPath } from "node:url";
import { bundleRuntime } from "../components/runtime/bundle.ts";
import { buildProgram } from "./program.ts";

const RUNTIME_ENTRY = fileURLToPath(new URL("../runtime/main.ts", import.meta.url));

const outputs = buildProgram({ bundle: () => bundleRuntime(RUNTIME_ENTRY) });

export const mode = outputs.mode;
export const managerUrl = outputs.managerUrl;
export const catalog = outputs.catalog;
export const clusterName = outputs.clusterName;
export const kubeconfig = outputs.kubeconfig;
export const outputsBucket = outputs.outputsBucket;
export const layersBucket = outputs.layersBucket;
export const runtimeSha256 = outputs.runtimeSha256;
