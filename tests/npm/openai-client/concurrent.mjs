// Many concurrent clients with mixed prompt and output lengths, streamed and not: every greedy
// answer must equal the one the same request gets alone.
import { client, check } from "./common.mjs";

const clients = Number(process.argv[4] ?? 24);
const model = (await client.models.list()).data[0].id;
const prompts = [
  "Once upon a time", "Tom and Lily", "The dog", "One day, a little girl named Sue went to the park with her mom",
  "Sam had a big red ball. He", "Once upon a time, there was a little boy named Tim. Tim loved to play with his toys",
];
const jobs = [];
for (let i = 0; i < clients; ++i) {
  jobs.push({ prompt: prompts[i % prompts.length], max_tokens: 4 + ((i * 7) % 40), stream: i % 3 === 0 });
}

async function run(job) {
  if (!job.stream) {
    const r = await client.completions.create({ model, prompt: job.prompt, max_tokens: job.max_tokens, temperature: 0 });
    return r.choices[0].text;
  }
  const s = await client.completions.create({ model, prompt: job.prompt, max_tokens: job.max_tokens, temperature: 0, stream: true });
  let text = "";
  for await (const chunk of s) for (const c of chunk.choices) text += c.text;
  return text;
}

// Alone, one after another.
const alone = [];
for (const job of jobs) alone.push(await run({ ...job, stream: false }));
// All at once.
const together = await Promise.all(jobs.map(run));
for (let i = 0; i < jobs.length; ++i) {
  check(together[i] === alone[i], `client ${i} (${JSON.stringify(jobs[i])}): ${JSON.stringify(together[i])} != ${JSON.stringify(alone[i])}`);
}
console.log(JSON.stringify({ clients: jobs.length, ok: true }));
