"use strict";

// The playground speaks only the public HTTP API: GET v1/models, then one POST per request.
// Every answer is rendered with textContent / DOM nodes: model output never becomes markup.

const EXAMPLES = {
  "text-classification": { text: "I absolutely loved this movie, the acting was wonderful!" },
  "token-classification": { text: "My name is Sarah and I live in London." },
  "question-answering": {
    question: "Where was Marie Curie born?",
    context:
      "Marie Curie was born in Warsaw in 1867. She studied physics and became a chemist. " +
      "In 1891, she moved to Paris to work at the Sorbonne.",
  },
  "fill-mask": { text: "Paris is the [MASK] of France." },
  "zero-shot-classification": {
    text: "The team won the match in extra time.",
    "candidate-labels": "sports, politics, cooking",
  },
  rerank: {
    query: "What is the capital of France?",
    documents: "Paris is the capital and largest city of France.\nBerlin is the capital of Germany.\nThe Seine flows through Paris.",
  },
  "feature-extraction": { text: "A man is eating food." },
};

const KEY_STORAGE = "bertserve-playground-api-key";
const $ = (id) => document.getElementById(id);
let models = [];
let modelLoads = 0;

function apiKey() {
  return $("api-key").value.trim();
}

function headers() {
  const sent = { "Content-Type": "application/json" };
  if (apiKey()) sent.Authorization = `Bearer ${apiKey()}`;
  return sent;
}

function setStatus(state, message) {
  $("status").dataset.state = state;
  $("status").textContent = message;
}

function errorMessage(status, body) {
  if (body && body.error) return `${status} ${body.error.type}: ${body.error.message}`;
  return `HTTP ${status}`;
}

async function loadModels() {
  const load = ++modelLoads;
  setStatus("loading", "Loading models ...");
  const response = await fetch("v1/models", { headers: headers() });
  const body = await response.json().catch(() => null);
  if (load !== modelLoads) return; // a later load (another key) is under way: its answer counts
  if (!response.ok) {
    const hint = response.status === 401 ? " (enter the server's API key above)" : "";
    setStatus("error", errorMessage(response.status, body) + hint);
    return;
  }
  models = body.models;
  const select = $("model");
  const chosen = select.value;
  select.replaceChildren(
    ...models.map((model) => {
      const option = document.createElement("option");
      option.value = model.name;
      option.textContent = `${model.name} (${model.task})${model.ready ? "" : " - loading"}`;
      return option;
    }),
  );
  if (models.some((model) => model.name === chosen)) select.value = chosen;
  if (select.value !== chosen) showModel();
  setStatus("ready", models.length ? "" : "The server has no models loaded.");
}

function currentModel() {
  return models.find((model) => model.name === $("model").value);
}

function showModel() {
  const model = currentModel();
  const task = model ? model.task : "";
  $("task").textContent = task;
  for (const element of document.querySelectorAll("[data-tasks]")) {
    element.hidden = !element.dataset.tasks.split(" ").includes(task);
  }
  for (const [field, value] of Object.entries(EXAMPLES[task] || {})) $(field).value = value;
  $("text-pair").value = "";
  $("result").replaceChildren();
  showCurl();
  $("raw").textContent = "";
}

// The curl command of the request the form would send now: shown before the first run, kept up to date while typing.
function showCurl() {
  const model = currentModel();
  if (!model) return;
  const [path, request] = requestFor(model);
  $("curl").textContent = curlCommand(path, request);
}

function requestFor(model) {
  const text = $("text").value;
  switch (model.task) {
    case "text-classification": {
      const pair = $("text-pair").value;
      const inputs = pair ? { text, text_pair: pair } : text;
      return ["v1/text-classification", { model: model.name, inputs, top_k: null }];
    }
    case "token-classification":
      return ["v1/token-classification", { model: model.name, inputs: text }];
    case "question-answering": {
      const inputs = { question: $("question").value, context: $("context").value };
      return ["v1/question-answering", { model: model.name, inputs, top_k: 3 }];
    }
    case "fill-mask":
      return ["v1/fill-mask", { model: model.name, inputs: text, top_k: 5 }];
    case "zero-shot-classification": {
      const labels = $("candidate-labels").value.split(",").map((label) => label.trim()).filter(Boolean);
      return ["v1/zero-shot-classification", { model: model.name, inputs: text, candidate_labels: labels }];
    }
    case "rerank": {
      const documents = $("documents").value.split("\n").map((line) => line.trim()).filter(Boolean);
      return ["v1/rerank", { model: model.name, query: $("query").value, documents, return_documents: true }];
    }
    case "feature-extraction":
      return ["v1/embeddings", { model: model.name, input: text }];
    default:
      throw new Error(`the playground has no form for the task ${model.task}`);
  }
}

function shellQuote(text) {
  return `'${text.replaceAll("'", "'\\''")}'`;
}

function curlCommand(path, body) {
  const lines = [`curl -s ${new URL(path, document.baseURI).href}`, "-H 'Content-Type: application/json'"];
  if (apiKey()) lines.push('-H "Authorization: Bearer $BERTSERVE_API_KEY"');
  lines.push(`-d ${shellQuote(JSON.stringify(body))}`);
  return lines.join(" \\\n  ");
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function scoreRow(label, score) {
  const row = element("div", "score-row");
  row.dataset.label = label;
  row.dataset.score = String(score);
  const bar = element("div", "bar");
  const fill = element("div", "fill");
  fill.style.width = `${Math.max(0, Math.min(1, score)) * 100}%`;
  bar.append(fill);
  row.append(element("span", "label", label), bar, element("span", "score", `${(score * 100).toFixed(1)}%`));
  return row;
}

function typeColour(type) {
  let hash = 0;
  for (const char of type) hash = (hash * 31 + char.codePointAt(0)) % 360;
  return `hsl(${hash}, 75%, 82%)`;
}

function highlighted(text, spans, render) {
  const paragraph = element("p", "highlighted");
  let position = 0;
  for (const span of [...spans].sort((a, b) => a.start - b.start)) {
    if (span.start < position) continue;
    paragraph.append(document.createTextNode(text.slice(position, span.start)), render(span));
    position = span.end;
  }
  paragraph.append(document.createTextNode(text.slice(position)));
  return paragraph;
}

function renderEntities(text, entities) {
  const located = entities.filter((entity) => entity.start !== null && entity.end !== null);
  const paragraph = highlighted(text, located, (entity) => {
    const type = entity.entity_group || entity.entity || "";
    const mark = element("mark", "entity");
    mark.dataset.type = type;
    mark.dataset.score = String(entity.score);
    mark.title = `${type} ${(entity.score * 100).toFixed(1)}%`;
    mark.style.background = typeColour(type);
    mark.append(element("span", "entity-text", text.slice(entity.start, entity.end)), element("span", "entity-type", type));
    return mark;
  });
  const parts = [paragraph];
  if (!located.length) parts.push(element("p", "empty", "No entities found."));
  return parts;
}

function renderAnswers(context, answers) {
  const parts = [];
  if (answers.length) {
    const best = answers[0];
    parts.push(highlighted(context, [best], (answer) => {
      const mark = element("mark", "answer", context.slice(answer.start, answer.end));
      mark.dataset.score = String(answer.score);
      return mark;
    }));
  }
  parts.push(...answers.map((answer) => scoreRow(answer.answer, answer.score)));
  return parts;
}

function renderFillMask(perMask) {
  return perMask.map((predictions, position) => {
    const group = element("div", "mask-group");
    group.append(element("h3", "", perMask.length > 1 ? `Mask ${position + 1}` : "Candidates"));
    group.append(...predictions.map((prediction) => scoreRow(prediction.token_str, prediction.score)));
    return group;
  });
}

function renderEmbedding(vector) {
  const shown = vector.slice(0, 8).map((value) => value.toFixed(4)).join(", ");
  return [element("p", "embedding", `${vector.length} dimensions: [${shown}${vector.length > 8 ? ", ..." : ""}]`)];
}

function render(model, request, body) {
  switch (model.task) {
    case "text-classification":
      return body.results[0].map((item) => scoreRow(item.label, item.score));
    case "token-classification":
      return renderEntities(request.inputs, body.results[0]);
    case "question-answering":
      return renderAnswers(request.inputs.context, body.results[0]);
    case "fill-mask":
      return renderFillMask(body.results[0]);
    case "zero-shot-classification": {
      const result = body.results[0];
      return result.labels.map((label, index) => scoreRow(label, result.scores[index]));
    }
    case "rerank":
      return body.results.map((item) => scoreRow(item.document ? item.document.text : `#${item.index}`, item.relevance_score));
    case "feature-extraction":
      return renderEmbedding(body.data[0].embedding);
    default:
      return [];
  }
}

async function run(event) {
  event.preventDefault();
  const model = currentModel();
  if (!model) return;
  const [path, request] = requestFor(model);
  $("curl").textContent = curlCommand(path, request);
  $("result").replaceChildren();
  $("raw").textContent = "";
  setStatus("loading", "Running ...");
  const started = performance.now();
  try {
    const response = await fetch(path, { method: "POST", headers: headers(), body: JSON.stringify(request) });
    const body = await response.json().catch(() => null);
    $("raw").textContent = JSON.stringify(body, null, 2);
    if (!response.ok) {
      setStatus("error", errorMessage(response.status, body));
      return;
    }
    $("result").replaceChildren(...render(model, request, body));
    setStatus("done", `${model.name}: answered in ${Math.round(performance.now() - started)} ms`);
  } catch (error) {
    setStatus("error", String(error));
  }
}

$("api-key").value = sessionStorage.getItem(KEY_STORAGE) || "";
$("api-key").addEventListener("change", () => {
  sessionStorage.setItem(KEY_STORAGE, apiKey());
  loadModels().catch((error) => setStatus("error", String(error)));
});
$("model").addEventListener("change", showModel);
$("request-form").addEventListener("submit", run);
$("request-form").addEventListener("input", showCurl);
loadModels().catch((error) => setStatus("error", String(error)));
