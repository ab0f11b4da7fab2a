-- test_text_train.lua: a tiny GPT learns from real text (issue 41). Trained on the Book of Genesis
-- (experiments/data/kjv_genesis.jsonl, public domain) through data = {dataset = ...} and the
-- llama3 fixture's tokenizer for 300 steps on the CPU, its mean loss over the data set's targets
-- falls below the text's unigram entropy (what the best model that ignores context reaches), and
-- far below ln V (the untrained model's): the model learns from the real tokens, in their order.
package.path = arg[0]:match("(.*/)") .. "?.lua;" .. package.path
local check = require("check")
local dp = require("dpprof")
local text = require("dpprof.text")

local here = arg[0]:match("(.*/)")
local TOK = here .. "../fixtures/tokenizer/llama3"
local KJV = here .. "../../experiments/data/kjv_genesis.jsonl"
local SEQ, B, V = 64, 16, 1007

-- the unigram entropy (nats) of the targets the model is trained on: every id but each sample's
-- first, within seq_len
local ids = text.samples({ dataset = KJV, tokenizer = TOK })
local counts, n = {}, 0
for _, s in ipairs(ids) do
  for j = 2, math.min(#s, SEQ + 1) do
    counts[s[j]] = (counts[s[j]] or 0) + 1
    n = n + 1
  end
end
local H = 0
for _, c in pairs(counts) do H = H - c / n * math.log(c / n) end

-- the trained model's mean loss over the data set, in batches of B (on.finished: after training)
local mean_loss
local r = dp.experiment{
  name = "genesis", method = "vanilla", device = "cpu", iters = 300, warmup = 0, snapshots = "none", seed = 1,
  model = { arch = "gpt", vocab = V, hidden = 64, heads = 4, layers = 2, seq_len = SEQ, batch = B },
  optimizer = { name = "adamw", lr = 3e-3 },
  data = { dataset = KJV, tokenizer = TOK },
  on = { finished = function(ctx)
    local sum, count = 0, 0
    for first = 1, #ids - B + 1, B do
      local batch = {}
      for k = first, first + B - 1 do batch[#batch + 1] = ids[k] end
      local lengths = {}
      for k, s in ipairs(batch) do lengths[k] = math.min(#s - 1, SEQ) end
      local bt = dp.batch{ model = ctx.model, tokens = batch, lengths = lengths }
      local loss = ctx.model:forward(bt)
      local targets = 0
      for _, l in ipairs(lengths) do targets = targets + l end
      sum, count = sum + loss * targets, count + targets
      ctx.model:release_activations()
      bt.inputs:free()
      bt.targets:free()
    end
    mean_loss = sum / count
  end },
}
check.eq(r.status, "ok", "training on the data set: " .. tostring(r.message))
check.eq(r.data.samples, 1533, "every verse a sample")
print(string.format("test_text_train: unigram entropy %.3f nats, ln V %.3f, trained mean loss %.3f over %d targets",
                    H, math.log(V), mean_loss, n))
check.truthy(mean_loss < H, string.format("the trained loss %.3f is below the unigram entropy %.3f", mean_loss, H))
check.truthy(H < math.log(V) - 0.5, "the text is far from uniform")
print("test_text_train: ok")
