-- Shared spec helpers. `local H = require "spec.helpers"`.
-- What users need too lives in the library, `fhelium.testing`
-- (docs/testing.md): H.skip_it, H.gpu_it, H.gpus_it, H.seed and H.has_gpu
-- are its functions; H.expect_error is assert.raises_kind with Lua patterns;
-- H.gpu_window_it is the project's own (compute-sanitizer, scripts/gpu-check);
-- H.mulmod and H.powmod are the specs' reference modular arithmetic;
-- H.u64 and H.residues build the CKKS specs' uint64 rows.
local testing = require "fhelium.testing"
local luassert = require "luassert"
local bit = require "bit"
local H = {}

H.has_gpu = testing.has_gpu()

--- skip_it(name, reason): testing.skip_it (a wrapper in a spec file must
--- tail-call it: `return H.skip_it(name, why)`, so that its caller's line
--- is reported).
H.skip_it = testing.skip_it

--- gpu_it(name, fn), gpus_it(n, name, fn): testing.gpu_it / gpus_it (tag
--- #gpu; skipped with the reason without a CUDA device, failed instead under
--- scripts/test --gpu, which sets FHELIUM_REQUIRE_GPU=1).
H.gpu_it = testing.gpu_it
H.gpus_it = testing.gpus_it

--- gpu_window_it(name, fn): a gpu_it whose assertions rely on a kernel
--- (fh.cuda._spin) still running when the host checks (a race window opened
--- on purpose). compute-sanitizer serialises launches, so under
--- scripts/gpu-check (FHELIUM_SANITIZER set) it is skipped with that reason.
function H.gpu_window_it(name, fn)
  local tool = os.getenv("FHELIUM_SANITIZER")
  if testing.has_gpu() and tool and tool ~= "" then
    return testing.skip_it(name .. " #gpu", "runs under compute-sanitizer " .. tool .. ", which serialises " ..
      "launches: the spec relies on a kernel still running when the host checks")
  end
  return testing.gpu_it(name, fn)
end

--- Calls fn(...) expecting an fhelium error of `kind` (or a descendant)
--- whose message matches every Lua pattern in `patterns` (a string or a
--- list). Returns the error.
function H.expect_error(kind, patterns, fn, ...)
  local n, args = select("#", ...), { ... }
  local err = luassert.raises_kind(kind, function() return fn(unpack(args, 1, n)) end)
  if type(patterns) == "string" then patterns = { patterns } end
  for _, p in ipairs(patterns or {}) do
    luassert(err.message:find(p), ("message %q does not match %q"):format(err.message, p))
  end
  return err
end

--- A seed for randomized specs: testing.seed (printed once per spec and
--- label; FHELIUM_SEED replays one).
H.seed = testing.seed

--- Element-wise Lua reference over two equal-shape nested lists.
function H.map2(a, b, f)
  if type(a) ~= "table" then return f(a, b) end
  local r = {}
  for i = 1, #a do r[i] = H.map2(a[i], b[i], f) end
  return r
end

--- Reference modular arithmetic on uint64 cdata, independent of the C code:
--- a * b mod q by double-and-add (exact for q < 2^62: every intermediate stays below
--- 2^63), and a^e mod q by square-and-multiply.
function H.mulmod(a, b, q)
  a, b = a % q, b % q
  local r = 0ULL
  for i = 63, 0, -1 do
    r = r + r
    if r >= q then r = r - q end
    if bit.band(bit.rshift(b, i), 1ULL) ~= 0ULL then
      r = r + a
      if r >= q then r = r - q end
    end
  end
  return r
end
function H.powmod(a, e, q)
  local r, b = 1ULL, a % q
  while e > 0ULL do
    if bit.band(e, 1ULL) ~= 0ULL then r = H.mulmod(r, b, q) end
    b = H.mulmod(b, b, q)
    e = bit.rshift(e, 1)
  end
  return r
end

--- u64(list): a uint64 tensor of the numbers or cdata in list, shape {#list}.
function H.u64(list) return require("fhelium").tensor(list, { dtype = "uint64" }):view(#list) end

--- residues(shape, qs, n, seed): a uint64 tensor of shape [*shape, #qs, n] whose row l
--- (in every group) holds uniform residues modulo qs[l], each row from its own seed
--- (seed + 1, seed + 2, ... in group-major order).
function H.residues(shape, qs, n, seed)
  local fh = require "fhelium"
  local full = {}
  for _, s in ipairs(shape) do full[#full + 1] = s end
  full[#full + 1] = #qs
  full[#full + 1] = n
  local t = fh.empty(full, { dtype = "uint64" })
  local flat = t:view(-1, #qs, n)
  for g = 1, flat.shape[1] do
    for l = 1, #qs do
      seed = seed + 1
      flat:select(1, g):select(1, l):copy_(fh.core._ckks.sample("uniform", n, { q = qs[l], seed = seed }))
    end
  end
  return t
end

--- ckks_params(log_n, p_bits): the small insecure CKKS parameters of the fused mod-down
--- specs (Q primes of 40, 40, 40 and 60 bits, P primes of p_bits, scale 2^40).
function H.ckks_params(log_n, p_bits)
  return { log_n = log_n, q_bits = { 40, 40, 40, 60 }, p_bits = p_bits, scale = 2 ^ 40, allow_insecure = true }
end

--- ckks_operands(device, log_n, p_bits, batch, seed): an engine of ckks_params(log_n, p_bits)
--- on device (seeded with seed), its secret key and relinearization key, and two NTT-domain
--- ciphertexts of uniform messages in [-0.5, 0.5) of shape {batch, slots} (batch > 1) or
--- {slots}, drawn from fh.Generator(seed). Returns e, sk, rlk, a, b and the messages'
--- product (on the CPU). Engines on two devices with one seed hold the same keys and
--- ciphertexts, word for word.
function H.ckks_operands(device, log_n, p_bits, batch, seed)
  local fh = require "fhelium"
  local e = fh.CkksEngine(H.ckks_params(log_n, p_bits), { device = device, seed = seed })
  local sk = e:create_secret_key()
  local pk = e:create_public_key(sk)
  local rlk = e:create_relinearization_key(sk)
  local S = e.context.num_slots
  local g = fh.Generator(seed)
  local shape = batch > 1 and { batch, S } or { S }
  local m1 = fh.rand(shape, { dtype = "float64", generator = g }) - 0.5
  local m2 = fh.rand(shape, { dtype = "float64", generator = g }) - 0.5
  local a = e:coefficient_domain_to_ntt_domain(e:encrypt_message(m1:to(device), pk))
  local b = e:coefficient_domain_to_ntt_domain(e:encrypt_message(m2:to(device), pk))
  return e, sk, rlk, a, b, m1 * m2
end

return H
