--[[ examples/encrypted_pipeline.lua: a stream of encrypted requests through
a ring of slots (fh.pipeline; docs/pipeline.md).

    scripts/run examples/encrypted_pipeline.lua [--slots 2S] [--streams S (4; cpu 1)] [--requests M] [--size 8]
                                                [--level L] [--device cuda|cuda:N|cpu] [--seed 1]
                                                [--trace PREFIX]

M vectors are encrypted ahead on the host (a CPU engine holds the secret and
public keys; the device engine gets rotation keys made from the same secret
key) and kept in pinned host memory. They are encrypted at --level, by
default the level the program needs (max_level - 1: it consumes one level),
so a request carries 3 Q primes, not 8, and each rotation reads a sixth of
the key bytes; --level 0 sends every prime. Each is a request for the
matrix-vector program of examples/matrix_vector.lua (examples/matvec.lua):
pushed through the ring (copy in, replay, read back), every result
decrypted on the host and checked against the plaintext product and
against an eager run of the program on the device, bit for bit.

It prints the stages measured alone over all M requests (copy in, compute,
copy out, each waited for before the next), the serial time (each request
alone: push, then wait for its result), the bound (max(copy in + copy out,
compute): perfect overlap), the pipelined time and requests/s, and the
overlap achieved: (serial - pipelined) / (serial - bound), 100% when the
pipeline reaches the bound. --trace PREFIX writes PREFIX.json (Chrome
trace-event JSON: Perfetto, chrome://tracing) and PREFIX.svg (the timeline
as a picture) of the pipelined run.

--device defaults to cuda when a GPU is present, else cpu, where the same
script runs with HostGraphProgram slots (every step on the host, in order:
no overlap to expect). --requests defaults to 64 on a GPU and 6 on the cpu,
--streams (compute streams: small-ring kernels do not fill a GPU, so several
programs replay side by side) to 4 on a GPU and 1 on the cpu, --slots to 2
per compute stream (one copied in while the other computes).
]]
local fh = require "fhelium"
local ex = fh.execution
local matvec = dofile((arg and arg[0] and arg[0]:match("^(.*)/") or ".") .. "/matvec.lua")

-- ---- options -----------------------------------------------------------------
local defaults = { size = 8, seed = 1 } -- streams: 4 on a GPU, 1 on the cpu; slots: 2 per stream
local opts = { device = fh.cuda.is_available() and "cuda" or "cpu" }
for k, v in pairs(defaults) do opts[k] = v end
local USAGE = "usage: encrypted_pipeline.lua [--slots K] [--streams S] [--requests M] [--size N] [--level L] "
  .. "[--device cpu|cuda|cuda:N] [--seed S] [--trace PREFIX]\n"
do
  local known = { slots = "n", streams = "n", requests = "n", size = "n", seed = "n", device = "s", trace = "s",
    level = "n" }
  local i = 1
  while arg and i <= #arg do
    local k, v = arg[i]:match("^%-%-(%w+)$"), arg[i + 1]
    if k == nil or known[k] == nil or v == nil or (known[k] == "n" and tonumber(v) == nil) then
      io.stderr:write(USAGE)
      os.exit(2)
    end
    opts[k] = known[k] == "n" and tonumber(v) or v
    i = i + 2
  end
end
local device = opts.device == "cuda" and ("cuda:" .. fh.cuda.current_device()) or opts.device
local on_gpu = device ~= "cpu"
opts.streams = opts.streams or (on_gpu and 4 or 1)
opts.slots = opts.slots or 2 * math.max(1, math.floor(opts.streams))
local M = opts.requests or (on_gpu and 64 or 6)
local size = opts.size
for _, k in ipairs { "slots", "streams", "size", "seed" } do
  if opts[k] < 1 or opts[k] ~= math.floor(opts[k]) then
    io.stderr:write(("encrypted_pipeline.lua: --%s must be a positive integer\n"):format(k), USAGE)
    os.exit(2)
  end
end
if M < 1 or M ~= math.floor(M) then
  io.stderr:write("encrypted_pipeline.lua: --requests must be a positive integer\n", USAGE)
  os.exit(2)
end

-- ---- engines, keys, the program --------------------------------------------------
local PRESET = fh.Preset.slots8192_scale40_levels7_int64 -- N = 2^14
local host = fh.CkksEngine(PRESET, { device = "cpu", seed = opts.seed })
local engine = on_gpu and fh.CkksEngine(PRESET, { device = device, seed = opts.seed + 1 }) or host
local sk = host:create_secret_key()
local pk = host:create_public_key(sk)
matvec.create_keys(engine, sk, size)
local gen = fh.Generator(opts.seed)
local matrix = matvec.matrix(gen, size)
local level = opts.level or matvec.request_level(engine.context)
if level < 0 or level >= engine.context.max_level or level ~= math.floor(level) then
  io.stderr:write(("encrypted_pipeline.lua: --level must be an integer in 0..%d (the program rescales once)\n")
    :format(engine.context.max_level - 1), USAGE)
  os.exit(2)
end
local program = matvec.program(engine, matrix, size, { level = level })

-- ---- M requests, encrypted ahead on the host, in pinned memory ---------------------
local vectors, requests = {}, {}
local t_enc = fh.core.exec_clock()
for i = 1, M do
  vectors[i] = matvec.uniform(gen, size)
  local ct = matvec.encrypt_vector(host, pk, vectors[i], size, level)
  requests[i] = on_gpu and ex.pin_value_tree({ ct }) or { ct }
end
t_enc = fh.core.exec_clock() - t_enc

-- ---- the pipeline ---------------------------------------------------------------------
local pipe = fh.pipeline(program, { example_inputs = requests[1], slots = opts.slots,
  compute_streams = opts.streams, device = device, warmup = 1 })
local bytes_in = ex.value_tree_nbytes(requests[1])
print(("encrypted pipeline: %d requests of the size-%d matrix-vector program, %s, N = %d, level %d (%d Q primes)")
  :format(M, size, device, engine.context.ring_degree, level, #engine.context:prime_ids(level, "Q")))
print(("%s, %d encrypted on the host in %.2f s (%.2f MiB each, %s)"):format(tostring(pipe), M, t_enc,
  bytes_in / 2 ^ 20, on_gpu and "pinned" or "pageable"))

local clock = fh.core.exec_clock
-- the stages alone, then each request alone, then the pipeline
local stages = pipe:measure(requests)
-- dropped results give their pinned memory back before each timed run (a
-- collection, as a long-running pipeline reaches its steady state)
collectgarbage("collect")
local t0 = clock()
for i = 1, M do pipe:push(requests[i]):result() end
local serial = clock() - t0
collectgarbage("collect")
if opts.trace then fh.trace.start() end
t0 = clock()
local pending = {}
for i = 1, M do pending[i] = pipe:push(requests[i]) end
local results = {}
for i = 1, M do results[i] = pending[i]:result() end
local pipelined = clock() - t0
local trace = opts.trace and fh.trace.stop() or nil

-- ---- every result: decrypted against the plaintext product, and eager on the device ----
local TOL = matvec.error_bound(engine.context, size, level) -- 6 sigma (docs/ckks.md, "Noise and tolerances")
local worst, same, failed = 0, 0, 0
for i = 1, M do
  local err = matvec.max_error(host, sk, results[i], matvec.reference(matrix, vectors[i], size), size)
  local ct = requests[i][1]
  local eager = program(on_gpu and ct:to(device) or ct)
  local equal = fh.equal(eager.data:cpu(), results[i].data)
  worst = math.max(worst, err)
  if equal then same = same + 1 end
  if err > TOL or not equal then failed = failed + 1 end
end
pipe:close()

-- ---- report ---------------------------------------------------------------------------
local function ms(s) return ("%9.2f ms"):format(s * 1e3) end
print(("stages alone over %d requests: copy in %s, compute %s, copy out %s"):format(M, ms(stages.copy_in),
  ms(stages.compute), ms(stages.copy_out)))
print(("%-34s %s  %8.1f requests/s"):format("serial (each request alone)", ms(serial), M / serial))
print(("%-34s %s  %8.1f requests/s"):format("bound max(copies, compute)", ms(stages.bound), M / stages.bound))
print(("%-34s %s  %8.1f requests/s"):format(("pipelined (%d slots, %d stream%s)"):format(opts.slots, opts.streams,
  opts.streams == 1 and "" or "s"), ms(pipelined), M / pipelined))
local gap = serial - stages.bound
local overlap = gap > 0.01 * serial and ("%.0f%% of (serial - bound)"):format(100 * (serial - pipelined) / gap)
  or "- (serial is at the bound already: nothing to overlap)"
print(("speed-up over serial %.2fx; pipelined / bound %.2f; overlap achieved %s"):format(serial / pipelined,
  pipelined / stages.bound, overlap))
if trace then
  trace:save(opts.trace .. ".json"):svg(opts.trace .. ".svg", { title = ("examples/encrypted_pipeline.lua: %d "
    .. "requests, size %d, %s, %d slots, %d compute stream%s"):format(M, size, device, opts.slots, opts.streams,
    opts.streams == 1 and "" or "s") })
  print(("trace: %s; written to %s.json and %s.svg"):format(tostring(trace), opts.trace, opts.trace))
end
print(("results: %d of %d within %.3e of the plaintext product (worst %.3e), %d of %d bit-identical to eager: %s")
  :format(M - failed, M, TOL, worst, same, M, failed == 0 and "PASS" or "FAIL"))
if failed > 0 then os.exit(1) end
