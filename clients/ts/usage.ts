// A model picker's use of memfit, type-checked against types generated from openapi.yaml.
// A spec change that breaks this caller fails CI (scripts/test: npm run generate && npm run check).
import type { components, paths } from "./generated/memfit";

type Request = components["schemas"]["WireFitVerdictRequest"];
type Batch = paths["/v1/models/fit/batch"]["post"]["responses"][200]["content"]["application/json"];
type Result = components["schemas"]["WireFitVerdictResult"];
type Problem = components["schemas"]["Problem"];
type ModelList = paths["/v1/models"]["get"]["responses"][200]["content"]["application/json"];

const batch: paths["/v1/models/fit/batch"]["post"]["requestBody"]["content"]["application/json"] = [
  { modelId: "meta-llama/Llama-3.1-8B-Instruct-GGUF:Q4_K_M" },
  { modelId: "Qwen/Qwen3-8B-GGUF:Q8_0", allocatedTokens: 32768, streams: 2, keyElementBytes: 1, valueElementBytes: 1, mode: "cpuOffload" },
  { modelId: "local/model", allocatedTokens: null, streams: null, keyElementBytes: null, valueElementBytes: null, mode: null },
] satisfies Request[];

// Every field read into a variable of the type a caller relies on: a field removed, made optional,
// made nullable or retyped in the spec stops this file from compiling.
function describe(result: Result): string {
  const modelId: string = result.modelId;
  const identity = result.identity;
  const idModel: string = identity.modelId;
  const revision: string = identity.revision;
  const quant: string = identity.quant;
  const artifactBytes: number | null = identity.artifactBytes;
  const estimate = result.estimate;
  const parts: string[] = estimate.parts.map((p) => {
    const component: string = p.component;
    const bytes: number | null = p.bytes;
    const basis: string = p.basis;
    const sharedKey: string = p.sharedKey;
    const note: string = p.note;
    return `${component}: ${bytes ?? "?"} (${basis}${sharedKey ? `, shared ${sharedKey}` : ""}) ${note}`;
  });
  const lower: number = estimate.lowerBoundBytes;
  const upper: number | null = estimate.upperBoundBytes;
  const weakest: string = estimate.weakestBasis;
  const missing: string[] = estimate.missing;
  const refusal: string = estimate.refusal;
  const w = estimate.workload;
  const allocatedTokens: number = w.allocatedTokens;
  const contextSource: string = w.contextSource;
  const streams: number = w.streams;
  const keyBytes: number = w.keyElementBytes;
  const valueBytes: number = w.valueElementBytes;
  const mode: string = w.mode;
  const prepared: number | null = w.preparedTokens;
  const verdict: string = result.verdict; // tolerant: any word a newer server sends
  const budgetBasis: string = result.budget.basis;
  const budgetBytes: number | null = result.budget.bytes;
  const committed: number | null = result.budget.committedBytes;
  const gpuAdmits: boolean | null = result.gpuAdmits;
  const limits: string[] = result.limits;
  return [modelId, `${idModel}@${revision} ${quant} ${artifactBytes ?? "not on disk"}`, ...parts,
          `${allocatedTokens} tokens (${contextSource}) x ${streams}, ${keyBytes}/${valueBytes} B, ${mode}, ` +
          `prepared ${prepared ?? "n/a"}`, `${lower}..${upper ?? "?"} ${weakest} missing ${missing.join(",")}`,
          refusal, `${budgetBasis} ${budgetBytes ?? "?"} committed ${committed ?? "?"}`,
          gpuAdmits === null ? "no GPU answer" : String(gpuAdmits), verdict, limits.join(",")].join("\n");
}

export async function pick(baseUrl: string, token: string): Promise<string[]> {
  const response = await fetch(`${baseUrl}/v1/models/fit/batch`, {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify(batch),
  });
  if (!response.ok) {
    const problem = (await response.json()) as Problem;
    throw new Error(`${problem.status} ${problem.type}: ${problem.title} - ${problem.detail}`);
  }
  const answer = (await response.json()) as Batch;
  const models = (await (await fetch(`${baseUrl}/v1/models`, { headers: { Authorization: `Bearer ${token}` } })).json()) as ModelList;
  const known = models.models.map((m) => {
    const artifactBytes: number | null = m.artifactBytes;
    const contextLimit: number | null = m.contextLimit;
    const hasProjector: boolean = m.hasProjector;
    const words: string[] = [m.modelId, m.source, m.root, m.architecture, m.quant, m.revision];
    return `${words.join(" ")} ${artifactBytes ?? "-"} ${contextLimit ?? "-"} ${hasProjector}`;
  });
  return [...answer.results.map(describe), ...known];
}
