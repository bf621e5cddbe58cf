-- The ranks' side of spec/distributed_spec.lua, run by scripts/launch:
--   scripts/launch -n N --device cpu|cuda spec/support/dist_worker.lua [case ...]
-- Every rank runs every case (or the ones named) in the same order and prints
-- one line per case:
--   case <name> rank <r> ok [digest <hex>]
--   case <name> rank <r> FAIL <message>
-- The digest (of the exact results: integers and residues) lets the spec
-- compare CPU ranks with CUDA ranks. Each case is collective: every rank calls
-- the same collectives, so a failed check never desynchronises the next case.
local fh = require "fhelium"
local ex = fh.execution
local dist = fh.distributed.init()
local R, W = dist.rank, dist.world_size
local DEV = dist.device -- "cpu" or "cuda:<local_rank>"
local ffi = require "ffi"

local function check(cond, msg, ...)
  if not cond then error(select("#", ...) > 0 and msg:format(...) or msg, 2) end
end

-- 32-bit FNV-1a over a string (digests of serialized results)
local function fnv(s, h)
  h = h or 2166136261
  for i = 1, #s do
    h = bit.bxor(h, s:byte(i))
    h = bit.tobit(h * 16777619)
  end
  return h
end
local function digest(tree) return bit.tohex(fnv(fh.serialize(tree))) end

-- rank r's data, reproducible on every rank
local function data(r, shape, dtype, seed)
  local g = fh.Generator(1000 * (seed or 1) + r)
  local t = fh.rand(shape, { generator = g, dtype = "float64" })
  if dtype == "float64" then return t end
  if dtype == "float32" or dtype == "complex128" then return t:to(dtype) end
  if dtype == "bool" then return (t * 2):to("int64"):to("bool") end
  return (t * 100):to(dtype)
end
local function on(t) return DEV == "cpu" and t or t:to(DEV) end

-- a small seeded ring: ciphertexts of every rank are reproducible everywhere
local engine = fh.CkksEngine({ log_n = 10, q_bits = { 40, 40, 60 }, p_bits = { 60 }, allow_insecure = true },
  { seed = 11, device = DEV })
local sk = engine:create_secret_key()
local pk = engine:create_public_key(sk)
local cts = {}
for r = 0, math.max(W, 3) - 1 do
  cts[r] = engine:encrypt_message({ r + 1, -(r + 1), 0.5 * r }, pk)
end
local function ct_sum(list) -- engine:add over the given ciphertexts
  local s = list[1]
  for i = 2, #list do s = engine:add(s, list[i]) end
  return s
end
local all_cts = {}
for r = 0, W - 1 do all_cts[#all_cts + 1] = cts[r] end

-- residues below primes near 2^62 (so that only few ranks fit without the split)
local Q = { 4611686018427387847ULL, 4611686018427387817ULL, 3ULL }
local function residues(r)
  local g = fh.Generator(77 + r)
  local rows = {}
  for i = 1, 3 do
    rows[i] = {}
    for j = 1, 5 do
      local x = fh.rand({ 1 }, { generator = g, dtype = "float64" }):item()
      rows[i][j] = (ffi.cast("uint64_t", x * 2 ^ 52) * 1023ULL + ffi.cast("uint64_t", j * 7919 + r)) % Q[i]
    end
  end
  return fh.tensor({ rows, rows }, { dtype = "uint64" }) -- [2, 3, 5]
end
local function residues_sum()
  local s = residues(0)
  for r = 1, W - 1 do s = fh.rns.add(s, residues(r), Q) end
  return s
end

local cases, order = {}, {}
local function case(name, fn)
  cases[name] = fn
  order[#order + 1] = name
end

local function expect_error(kind, patterns, fn, ...)
  local ok, err = pcall(fn, ...)
  if ok then error(("expected a %s, the call succeeded"):format(kind), 2) end
  check(fh.errors.is_error(err), "expected an error object, got %s", tostring(err))
  check(fh.errors.is(err, kind), "expected %s, got %s", kind, tostring(err))
  for _, p in ipairs(type(patterns) == "table" and patterns or { patterns }) do
    check(err.message:find(p), "message %q does not match %q", err.message, p)
  end
  return err
end

-- ---- the job -----------------------------------------------------------------------------
case("job", function()
  check(W == tonumber(arg[1] or W), "world_size %d", W)
  check(dist.local_rank == R, "local_rank %d for rank %d (one host)", dist.local_rank, R)
  check(dist.launched == true, "launched")
  check(dist.is_initialized(), "is_initialized")
  check(fh.distributed.init() == dist, "a second init() returns the module")
  local ranks = dist.all_gather(fh.tensor({ R }, { dtype = "int64" }))
  for r = 1, W do check(ranks[r]:item() == r - 1, "all_gather of ranks: %s", tostring(ranks[r]:item())) end
  dist.barrier()
  return digest(ranks)
end)

-- ---- tensors ---------------------------------------------------------------------------------
case("all_reduce_dtypes", function()
  local out = {}
  for _, dt in ipairs { "float32", "float64", "int32", "int64", "uint8", "uint32", "uint64", "complex128" } do
    local got = dist.all_reduce(on(data(R, { 3, 4 }, dt)))
    local want = data(0, { 3, 4 }, dt)
    for r = 1, W - 1 do want = want + data(r, { 3, 4 }, dt) end
    check(got.device == DEV, "%s: result on %s", dt, got.device)
    if dt:match("^float") or dt == "complex128" then
      check(fh.allclose(got:cpu(), want, { rtol = 1e-6, atol = 1e-9 }), "%s sum differs", dt)
    else
      check(fh.equal(got:cpu(), want), "%s sum differs: %s vs %s", dt, tostring(got), tostring(want))
      out[#out + 1] = got:cpu()
    end
  end
  return digest(out)
end)

case("all_reduce_views_and_trees", function()
  local base = on(data(R, { 4, 3 }, "float64"))
  local tree = { a = base:transpose(1, 2), b = { base:narrow(1, 2, 2), ex.tuple(base[1]) } }
  local got = dist.all_reduce(tree)
  check(got.a:is_contiguous(), "results are contiguous")
  check(ex.is_tuple(got.b[2]), "a tuple stays a tuple")
  local want = data(0, { 4, 3 }, "float64")
  for r = 1, W - 1 do want = want + data(r, { 4, 3 }, "float64") end
  check(fh.allclose(got.a:cpu(), want:transpose(1, 2)), "transposed view")
  check(fh.allclose(got.b[1]:cpu(), want:narrow(1, 2, 2)), "narrowed view")
  check(fh.allclose(got.b[2][1]:cpu(), want[1]), "selected row")
  -- inputs are read, never written
  check(fh.equal(base:cpu(), data(R, { 4, 3 }, "float64")), "input unchanged")
  local empty = dist.all_reduce({})
  check(type(empty) == "table" and #empty == 0, "an empty tree")
end)

case("all_gather", function()
  local got = dist.all_gather({ x = on(data(R, { 2, 2 }, "int64")), ct = cts[R] })
  check(#got == W, "%d trees", #got)
  for r = 1, W do
    check(fh.equal(got[r].x:cpu(), data(r - 1, { 2, 2 }, "int64")), "rank %d's tensor", r - 1)
    check(fh.value_equal(got[r].ct, cts[r - 1]), "rank %d's ciphertext", r - 1)
  end
  return digest(got)
end)

case("broadcast", function()
  local root = W - 1
  local got = dist.broadcast({ on(data(R, { 5 }, "int32")), cts[R] }, root)
  check(fh.equal(got[1]:cpu(), data(root, { 5 }, "int32")), "root's tensor")
  check(fh.value_equal(got[2], cts[root]), "root's ciphertext")
  local d0 = dist.broadcast(on(data(R, { 2 }, "uint64"))) -- root 0 by default
  check(fh.equal(d0:cpu(), data(0, { 2 }, "uint64")), "default root 0")
  return digest({ got, d0 })
end)

case("broadcast_serialized", function()
  -- only the root has the keys: they travel as a value file and arrive on this rank's device
  local root_engine = fh.CkksEngine({ log_n = 10, q_bits = { 40, 40, 60 }, p_bits = { 60 }, allow_insecure = true },
    { seed = 500, device = DEV })
  local rsk = root_engine:create_secret_key()
  -- the same seed and calls on every rank: each rank knows what the root sends
  local want = { pk = root_engine:create_public_key(rsk), rk = root_engine:create_rotation_key(rsk, 1) }
  local got = dist.broadcast(R == 0 and want or nil, 0)
  check(fh.value_equal(got.pk, want.pk) and fh.value_equal(got.rk, want.rk), "the root's keys")
  check(got.rk.step == 1 and got.pk.device == DEV, "rotation key step %s on %s", tostring(got.rk.step), got.pk.device)
  -- secret keys need allow_secret, and the refusal is raised on every rank
  expect_error("ValueError", { "secret" }, dist.broadcast, R == 0 and { rsk } or nil, 0)
  local s = dist.broadcast(R == 0 and { rsk } or nil, 0, { allow_secret = true })
  check(fh.value_equal(s[1], rsk), "secret key with allow_secret")
  return digest({ got.pk })
end)

case("reduce_scatter", function()
  local chunks = {}
  for j = 0, W - 1 do chunks[j + 1] = { t = on(data(10 * R + j, { 3 }, "int64")), ct = cts[(R + j) % W] } end
  local got = dist.reduce_scatter(chunks)
  local want, cl = data(R, { 3 }, "int64") * 0, {}
  for r = 0, W - 1 do
    want = want + data(10 * r + R, { 3 }, "int64")
    cl[#cl + 1] = cts[(r + R) % W]
  end
  check(fh.equal(got.t:cpu(), want), "tensor chunk sum")
  check(fh.value_equal(got.ct, ct_sum(cl)), "ciphertext chunk sum = engine:add")
  return digest(dist.all_gather(got))
end)

case("send_recv", function()
  if W < 2 then return end
  -- pairs (0 -> 1, then 1 -> 0); with three ranks also 2 -> 0
  local mine = { on(data(R, { 4 }, "float64")), cts[R] }
  if R == 0 then
    dist.send(mine, 1)
    local back = dist.recv({ on(fh.zeros({ 4 }, { dtype = "float64" })), cts[0] }, 1)
    check(fh.equal(back[1]:cpu(), data(1, { 4 }, "float64")) and fh.value_equal(back[2], cts[1]), "from rank 1")
    if W > 2 then
      local from2 = dist.recv(nil, 2) -- serialized: no template
      check(fh.equal(from2[1]:cpu(), data(2, { 4 }, "float64")) and fh.value_equal(from2[2], cts[2]), "from rank 2")
      check(from2[1].device == DEV, "rebuilt on this rank's device")
    end
  elseif R == 1 then
    local got = dist.recv(mine, 0) -- any tree of the sender's signature
    check(fh.equal(got[1]:cpu(), data(0, { 4 }, "float64")) and fh.value_equal(got[2], cts[0]), "from rank 0")
    dist.send(mine, 0)
  elseif R == 2 then
    dist.send(mine, 0)
  end
  -- a send to oneself or to no rank fails on this rank only (no peer waits)
  expect_error("ValueError", "dst", dist.send, mine, R)
  expect_error("ValueError", "src", dist.recv, mine, W + 3)
end)

-- ---- modular sums ------------------------------------------------------------------------------
case("modular_tensors", function()
  local want = residues_sum()
  local got = dist.all_reduce(on(residues(R)), { moduli = Q })
  check(fh.equal(got:cpu(), want), "modular sum = fh.rns.add over the ranks: %s vs %s", tostring(got), tostring(want))
  dist._force_split(true)
  local split = dist.all_reduce(on(residues(R)), { moduli = Q })
  dist._force_split(false)
  check(fh.equal(split:cpu(), want), "the split path gives the same residues")
  -- without moduli a uint64 sum wraps modulo 2^64 (with near-2^62 residues and 4+ ranks it would overflow)
  return digest({ got:cpu(), split:cpu() })
end)

case("modular_ciphertexts", function()
  local want = ct_sum(all_cts)
  local got = dist.all_reduce(cts[R])
  check(fh.value_equal(got, want), "all_reduce of ciphertexts = homomorphic addition (engine:add)")
  local m = engine:decrypt_message(got, sk, { is_real = true }):cpu():tolist()
  local s = W * (W + 1) / 2
  check(math.abs(m[1] - s) < 1e-3 and math.abs(m[2] + s) < 1e-3, "decrypts to the sum: %g %g", m[1], m[2])
  dist._force_split(true)
  local split = dist.all_reduce(cts[R])
  dist._force_split(false)
  check(fh.value_equal(split, want), "split path")
  -- NTT domain and rescaled ciphertexts, RNS plaintexts
  local ntt = dist.all_reduce(engine:coefficient_domain_to_ntt_domain(cts[R]))
  check(fh.value_equal(ntt, engine:coefficient_domain_to_ntt_domain(want)), "NTT domain")
  local pt = dist.all_reduce(engine:encode({ R + 1 }))
  check(pt.representation == "rns", "RNS plaintext stays RNS")
  local dec = engine:decode(pt, { is_real = true }):cpu():tolist()
  check(math.abs(dec[1] - W * (W + 1) / 2) < 1e-3, "plaintext sum %g", dec[1])
  return digest({ got, ntt, pt })
end)

-- ---- errors: raised on every rank, nothing hangs ------------------------------------------------
case("errors", function()
  if W < 2 then return end
  local other = R == 1 and 1 or 0
  -- shapes differ
  local e = expect_error("ExecutionInputError", { "^fh%.distributed%.all_reduce: the ranks' arguments differ",
    "rank 0 has", "rank 1 has", "shape={2}", "shape={3}" }, dist.all_reduce, on(fh.zeros({ 2 + other })))
  -- exact state differs: a rescaled ciphertext (level 1) on rank 1
  local c = cts[R]
  if R == 1 then
    c = engine:rescale_to_next_level(engine:multiply_plaintext(engine:coefficient_domain_to_ntt_domain(c),
      engine:prepare_plaintext_for_multiplication(engine:encode({ 1 }))))
    c = engine:ntt_domain_to_coefficient_domain(c)
  end
  expect_error("ExecutionInputError", { "differ", "level=" }, dist.all_reduce, c)
  -- one rank's bad argument: its own error there, the same kind everywhere else
  local bad = R == 1 and "not a tree" or on(fh.zeros({ 2 }))
  local be = expect_error("TypeError", { "^fh%.distributed%.all_gather: " }, dist.all_gather, bad)
  if R ~= 1 then check(be.message:find("rank 1 failed", 1, true), be.message) end
  expect_error("ValueError", { "unknown option 'bogus'" }, dist.all_reduce, on(fh.ones({ 1 })),
    R == 1 and { bogus = true } or nil)
  -- sums: bool, keys, moduli on the wrong tensors
  expect_error("TypeError", "bool", dist.all_reduce, on(fh.zeros({ 2 }, { dtype = "bool" })))
  expect_error("TypeError", "PublicKey is not summed", dist.all_reduce, pk)
  expect_error("TypeError", "uint64", dist.all_reduce, on(fh.zeros({ 3, 5 })), { moduli = Q })
  expect_error("ValueError", "3 moduli", dist.all_reduce, on(fh.zeros({ 2, 5 }, { dtype = "uint64" })), { moduli = Q })
  -- broadcast: roots differ; templates and nils mixed; a template unlike the root's tree
  expect_error("ExecutionInputError", "differ", dist.broadcast, on(fh.ones({ 1 })), R == 1 and 1 or 0)
  if W > 2 then
    local t = on(fh.ones({ 1 }))
    if R == 2 then t = nil end
    expect_error("ExecutionInputError", { "rank 1 passes a tree and rank 2 passes nil" }, dist.broadcast, t, 0)
  end
  expect_error("ExecutionInputError", "differ", dist.broadcast, on(fh.ones({ R == 0 and 2 or 3 })), 0)
  expect_error("ValueError", "root 9 is not a rank", dist.broadcast, on(fh.ones({ 1 })), 9)
  expect_error("ValueError", "is nil on the root", dist.broadcast, nil, 0)
  -- reduce_scatter needs one chunk per rank
  expect_error("ValueError", "chunks", dist.reduce_scatter, { on(fh.ones({ 1 })) })
  -- point to point: the receiver's template differs from the sender's tree
  if R <= 1 then
    if R == 0 then
      expect_error("ExecutionInputError", "differ", dist.send, on(fh.ones({ 2 })), 1)
    else
      expect_error("ExecutionInputError", "differ", dist.recv, on(fh.ones({ 3 })), 0)
    end
  end
  -- a CUDA tensor on another GPU than the rank's (every rank, so every rank raises its own error)
  if DEV ~= "cpu" and fh.cuda.device_count() > 1 then
    local other_gpu = ("cuda:%d"):format((dist.local_rank + 1) % fh.cuda.device_count())
    expect_error("ValueError", "this rank's GPU is " .. DEV, dist.all_reduce, fh.ones({ 1 }, { device = other_gpu }))
  end
  -- after all that, the ranks are still in step
  local s = dist.all_reduce(on(fh.ones({ 1 }, { dtype = "int64" })))
  check(s:cpu():item() == W, "in step after the errors")
  return e.kind
end)

-- ---- programs ------------------------------------------------------------------------------------
case("programs", function()
  -- a collective inside a captured program: every rank replays it as often as the others
  local Program = DEV == "cpu" and ex.HostGraphProgram or ex.CudaGraphProgram
  local prog = Program.capture(function(ct) return dist.all_reduce(engine:add(ct, ct)) end,
    { example_inputs = { cts[R] }, warmup = 1 })
  local want = ct_sum(all_cts)
  want = engine:add(want, want)
  for _ = 1, 2 do
    local out = prog:replay({ cts[R] }, { synchronize = true })
    check(fh.value_equal(out, want), "replayed all_reduce inside the program")
  end
  prog:close()
  -- the FHElium way: a rank-local replay, then the collective
  local local_prog = Program.capture(function(ct) return engine:add(ct, ct) end,
    { example_inputs = { cts[R] }, warmup = 0 })
  local out = dist.all_reduce(local_prog:replay({ cts[R] }, { synchronize = true }))
  check(fh.value_equal(out, want), "all_reduce around a replay")
  local_prog:close()
  return digest(out)
end)

-- ---- run -------------------------------------------------------------------------------------------
local only = {}
for i = 2, #(arg or {}) do only[arg[i]] = true end
for _, name in ipairs(order) do
  if next(only) == nil or only[name] then
    local ok, res = pcall(cases[name])
    if ok then
      io.write(("case %s rank %d ok%s\n"):format(name, R, res and (" digest " .. tostring(res)) or ""))
    else
      io.write(("case %s rank %d FAIL %s\n"):format(name, R, tostring(res):gsub("\n", " | ")))
    end
    io.stdout:flush()
  end
end
