-- CKKS contexts, values, envelopes and value files (docs/api.md "CKKS values and
-- engine"). The engine (engine/ckks/ckks_context.c, values.c,
-- engine/exec/value_io.c) validates everything; this module names things for Lua and turns 64-bit
-- primes into exact uint64_t cdata.
local ffi = require "ffi"
local core = require "fhelium.core"

local M = {}

--- fh.Preset.<member> = "<name>": the levels presets, e.g.
--- fh.Preset.slots8192_scale40_levels7_int64 == "slots8192-scale40-levels7-int64",
--- and FHElium 0.30's presets under its names, e.g.
--- fh.Preset.slots8192_scale40_depth7_int64 == "slots8192-scale40-depth7-int64".
M.Preset = {}
-- {name=, member=, family= ("levels" | "fhelium-0.30"), ring_degree=, scale_bits=, levels= (scale primes),
--  num_q_primes=, num_p_primes=, max_level=, galois_generator=, dtype= ("int64" | "int32": FHElium's residues)}
M.presets = core.ckks_presets()
for _, p in ipairs(M.presets) do M.Preset[p.member] = p.name end

local function u64list(bytes)
  local n = #bytes / 8
  local p = ffi.cast("const uint64_t*", bytes)
  local r = {}
  for i = 0, n - 1 do r[i + 1] = p[i] end -- uint64_t cdata (exact)
  return r
end

-- CkksContext fields computed on the Lua side: q_primes, p_primes and
-- primes (all primes; prime id i is primes[i + 1]), as uint64_t cdata.
core.CkksContext_methods._lua_field = function(ctx, k)
  if k == "q_primes" then return u64list(ctx:_primes_bytes("q")) end
  if k == "p_primes" then return u64list(ctx:_primes_bytes("p")) end
  if k == "primes" then return u64list(ctx:_primes_bytes("all")) end
  return nil
end

--- ctx:prime(id): the prime with 0-based prime id `id` (uint64_t cdata).
function core.CkksContext_methods.prime(ctx, id)
  local all = u64list(ctx:_primes_bytes("all"))
  if type(id) ~= "number" or id ~= math.floor(id) or id < 0 or id >= #all then
    require("fhelium.errors").raise("ValueError",
      ("CkksContext:prime: id must be an integer in [0, %d], got %s"):format(#all - 1, tostring(id)))
  end
  return all[id + 1]
end

M.value_types = { "Plaintext", "Ciphertext", "SecretKey", "PublicKey", "KeySwitchKey",
  "RelinearizationKey", "RotationKey", "ConjugationKey" }

--- Install the public names into the fh table.
function M.install(fh)
  fh.Preset = M.Preset
  fh.CkksContext = core.CkksContext
  fh.context_lookup = core.context_lookup
  fh.ckks_security_budget_bits = core.ckks_security_budget_bits
  fh.is_prime = core.is_prime
  for _, name in ipairs(M.value_types) do fh[name] = core[name] end
  fh.is_value = core.is_value
  fh.envelope = core.envelope
  fh.from_envelope = core.from_envelope
  fh.save = core.save
  fh.load = core.load
  fh.serialize = core.serialize
  fh.deserialize = core.deserialize
  --- fh.value_equal(a, b): same type, context, exact state and tensor
  --- contents (devices and strides may differ).
  fh.value_equal = function(a, b)
    if not core.is_value(a) then
      require("fhelium.errors").raise("TypeError",
        ("fh.value_equal: argument 1 (a) expected a CKKS value (Plaintext, Ciphertext or a key), got %s"):format(
          core.typename(a)))
    end
    return core.Value_methods.equal(a, b)
  end
end

return M
