// A small OpenAI-, Anthropic- and Ollama-compatible server around a real local model
// (SmolLM2-135M-Instruct, GGUF, run on the CPU by node-llama-cpp's prebuilt binary), for
// aido's LLM tests. It listens on 127.0.0.1 only and prints {"port": N} once the model is
// loaded. Requests run one at a time (one context sequence).
//
//   node server.mjs --model models/SmolLM2-135M-Instruct.Q4_1.gguf [--port 0]
//
// Routes: POST /v1/chat/completions (stream: SSE), POST /v1/messages (Anthropic),
// POST /api/chat and /api/generate (stream defaults to true: NDJSON), GET /api/tags,
// POST /api/show.
import http from "node:http";
import path from "node:path";
import { getLlama, LlamaChatSession, LlamaLogLevel } from "node-llama-cpp";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, arg, i, all) => {
    if (arg.startsWith("--")) pairs.push([arg.slice(2), all[i + 1]]);
    return pairs;
  }, []),
);
const modelPath = path.resolve(args.model ?? "models/SmolLM2-135M-Instruct.Q4_1.gguf");
const modelName = args.name ?? "smollm2:135m";
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({ contextSize: 1024, threads: 1 });
const sequence = context.getSequence();
let queue = Promise.resolve();

/** Run one chat: messages [{role, content}] -> the model's answer, chunk by chunk. */
function chat(messages, options, onChunk) {
  const run = async () => {
    const system = messages.filter((m) => m.role === "system").map((m) => text(m.content)).join("\n");
    const turns = messages.filter((m) => m.role !== "system");
    const last = turns.pop();
    const history = [];
    if (system) history.push({ type: "system", text: system });
    for (const m of turns) {
      history.push(m.role === "assistant" ? { type: "model", response: [text(m.content)] } : { type: "user", text: text(m.content) });
    }
    await sequence.clearHistory();
    const session = new LlamaChatSession({ contextSequence: sequence, autoDisposeSequence: false });
    session.setChatHistory(history);
    let completionTokens = 0;
    const answer = await session.prompt(text(last?.content ?? ""), {
      maxTokens: options.maxTokens ?? 64,
      temperature: options.temperature ?? 0,
      seed: options.seed ?? 1,
      onTextChunk: (chunk) => {
        completionTokens += 1;
        onChunk?.(chunk);
      },
    });
    session.dispose({ disposeSequence: false });
    return { answer, promptTokens: sequence.tokenMeter.usedInputTokens, completionTokens };
  };
  const result = queue.then(run, run);
  queue = result.catch(() => {});
  return result;
}

function text(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((b) => (typeof b === "string" ? b : b.text ?? "")).join("");
  return "";
}

function readJson(req) {
  return new Promise((resolve, reject) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      try {
        resolve(body ? JSON.parse(body) : {});
      } catch (e) {
        reject(e);
      }
    });
  });
}

function send(res, status, value) {
  const body = JSON.stringify(value);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

const created = 1700000000;

const routes = {
  "POST /v1/chat/completions": async (req, res, body) => {
    const options = { maxTokens: body.max_completion_tokens ?? body.max_tokens, temperature: body.temperature, seed: body.seed };
    if (body.stream) {
      res.writeHead(200, { "content-type": "text/event-stream" });
      const { answer } = await chat(body.messages ?? [], options, (chunk) => {
        res.write(`data: ${JSON.stringify({ id: "chatcmpl-local", object: "chat.completion.chunk", created, model: modelName, choices: [{ index: 0, delta: { content: chunk }, finish_reason: null }] })}\n\n`);
      });
      res.write(`data: ${JSON.stringify({ id: "chatcmpl-local", object: "chat.completion.chunk", created, model: modelName, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] })}\n\n`);
      res.end("data: [DONE]\n\n");
      return answer;
    }
    const { answer, promptTokens, completionTokens } = await chat(body.messages ?? [], options);
    send(res, 200, {
      id: "chatcmpl-local", object: "chat.completion", created, model: modelName,
      choices: [{ index: 0, message: { role: "assistant", content: answer }, finish_reason: "stop" }],
      usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
    });
  },
  "POST /v1/messages": async (req, res, body) => {
    if (!req.headers["x-api-key"] || req.headers["anthropic-version"] !== "2023-06-01") {
      return send(res, 401, { type: "error", error: { type: "authentication_error", message: "x-api-key and anthropic-version are required" } });
    }
    if (typeof body.max_tokens !== "number") {
      return send(res, 400, { type: "error", error: { type: "invalid_request_error", message: "max_tokens: Field required" } });
    }
    const messages = body.system ? [{ role: "system", content: body.system }, ...(body.messages ?? [])] : body.messages ?? [];
    const { answer, promptTokens, completionTokens } = await chat(messages, { maxTokens: body.max_tokens, temperature: body.temperature });
    send(res, 200, {
      id: "msg_local", type: "message", role: "assistant", model: modelName,
      content: [{ type: "text", text: answer }], stop_reason: "end_turn", stop_sequence: null,
      usage: { input_tokens: promptTokens, output_tokens: completionTokens },
    });
  },
  "POST /api/chat": async (req, res, body) => ollama(res, body, body.messages ?? [], (content) => ({ message: { role: "assistant", content } })),
  "POST /api/generate": async (req, res, body) => {
    const messages = [...(body.system ? [{ role: "system", content: body.system }] : []), { role: "user", content: body.prompt ?? "" }];
    return ollama(res, body, messages, (response) => ({ response }));
  },
  "GET /api/tags": async (req, res) =>
    send(res, 200, { models: [{ name: modelName, model: modelName, size: 98362432, details: { family: "llama", parameter_size: "135M", quantization_level: "Q4_1", format: "gguf" } }] }),
  "POST /api/show": async (req, res, body) =>
    body.model === modelName || body.name === modelName
      ? send(res, 200, { modelfile: `FROM ${path.basename(modelPath)}`, details: { family: "llama", parameter_size: "135M", quantization_level: "Q4_1", format: "gguf" }, model_info: { "general.architecture": "llama" } })
      : send(res, 404, { error: `model '${body.model ?? body.name}' not found` }),
};

async function ollama(res, body, messages, shape) {
  if (body.model !== modelName) return send(res, 404, { error: `model '${body.model}' not found, try pulling it first` });
  const options = { maxTokens: body.options?.num_predict, temperature: body.options?.temperature, seed: body.options?.seed };
  const at = new Date(created * 1000).toISOString();
  if (body.stream === false) {
    const { answer, promptTokens, completionTokens } = await chat(messages, options);
    return send(res, 200, { model: modelName, created_at: at, ...shape(answer), done: true, done_reason: "stop", prompt_eval_count: promptTokens, eval_count: completionTokens });
  }
  res.writeHead(200, { "content-type": "application/x-ndjson" });
  const { promptTokens, completionTokens } = await chat(messages, options, (chunk) => {
    res.write(JSON.stringify({ model: modelName, created_at: at, ...shape(chunk), done: false }) + "\n");
  });
  res.end(JSON.stringify({ model: modelName, created_at: at, ...shape(""), done: true, done_reason: "stop", prompt_eval_count: promptTokens, eval_count: completionTokens }) + "\n");
}

const server = http.createServer(async (req, res) => {
  const route = routes[`${req.method} ${req.url.split("?")[0]}`];
  if (!route) return send(res, 404, { error: "not found" });
  try {
    await route(req, res, req.method === "POST" ? await readJson(req) : {});
  } catch (e) {
    if (!res.headersSent) send(res, 500, { error: String(e?.message ?? e) });
    else res.end();
  }
});
server.listen(Number(args.port ?? 0), "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ port: server.address().port, model: modelName }) + "\n");
});
