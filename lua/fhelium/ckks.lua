-- fh.CkksEngine (API.md "CKKS values and engine"): the C engine
-- (engine/ckks/ckks_engine.c, ckks_eval.c) does the work and checks every
-- precondition; this layer turns Lua messages (numbers, lists, lists of
-- {re, im} pairs, nested lists for batches) into float64/complex128 tensors
-- and reads option tables.
--
--   local engine = fh.CkksEngine(fh.Preset.slots8192_scale40_levels7_int64, {device="cpu", seed=nil})
--   local engine = fh.CkksEngine({log_n=12, q_bits={40, 40, 60}, p_bits={60}, scale=2^40})
--
-- `seed=` makes every key, mask and error a deterministic function of the
-- seed: for tests only, INSECURE for real data.
local core = require "fhelium.core"
local errors = require "fhelium.errors"

local M = {}
local methods = core.CkksEngine_methods

local function raise(kind, msg) errors.raise(kind, msg) end

local function check_opts(fn, opts, allowed)
  if opts == nil then return {} end
  if type(opts) ~= "table" or core.is_tensor(opts) then
    raise("TypeError", ("CkksEngine:%s: options expected a table, got %s"):format(fn, type(opts)))
  end
  for k in pairs(opts) do
    if not allowed[k] then
      local names = {}
      for n in pairs(allowed) do names[#names + 1] = n end
      table.sort(names)
      raise("ValueError", ("CkksEngine:%s: unknown option '%s' (expected %s)"):format(fn, tostring(k),
        table.concat(names, ", ")))
    end
  end
  return opts
end

-- Is this table leaf a {re, im} pair?
local function is_pair(t)
  return type(t) == "table" and not core.is_tensor(t) and #t == 2 and type(t[1]) == "number"
      and type(t[2]) == "number"
end
local function first_leaf(t)
  while type(t) == "table" and not core.is_tensor(t) and not is_pair(t) do t = t[1] end
  return t
end

--- A message tensor (float64 or complex128) from a number, a (nested) list
--- or a tensor (other real dtypes are converted to float64).
function M.to_message(msg, fn)
  if core.is_tensor(msg) then
    if msg.dtype == "float64" or msg.dtype == "complex128" then return msg end
    if msg.dtype == "bool" then
      raise("TypeError", ("CkksEngine:%s: a bool tensor is not a message"):format(fn))
    end
    return core.tensor(msg, { dtype = "float64" })
  end
  if type(msg) == "number" then return core.full({}, msg, { dtype = "float64" }) end
  if type(msg) == "table" then
    if #msg == 0 then raise("ValueError", ("CkksEngine:%s: the message is empty"):format(fn)) end
    local leaf = first_leaf(msg)
    return core.tensor(msg, { dtype = is_pair(leaf) and "complex128" or "float64" })
  end
  raise("TypeError", ("CkksEngine:%s: the message must be a number, a list or a tensor, got %s"):format(fn, type(msg)))
end

local encode_opts = { level = true, scale = true }
local function level_scale(self, fn, opts)
  opts = check_opts(fn, opts, encode_opts)
  local level = opts.level or 0
  local scale = opts.scale or self.context.default_scale
  if type(level) ~= "number" then
    raise("TypeError", ("CkksEngine:%s: level expected an integer, got %s"):format(fn, type(level)))
  end
  if type(scale) ~= "number" then
    raise("TypeError", ("CkksEngine:%s: scale expected a number, got %s"):format(fn, type(scale)))
  end
  return level, scale
end

--- engine:encode(msg, {level=0, scale=context.default_scale}) -> RNS Plaintext
--- (coefficient domain). msg: number (every slot), list, list of {re, im}
--- pairs, nested lists / tensors [*batch, slot] (missing slots are zero).
function methods.encode(self, msg, opts)
  local level, scale = level_scale(self, "encode", opts)
  return self:_encode(M.to_message(msg, "encode"), level, scale)
end

local decode_opts = { is_real = true }
local function is_real_opt(fn, opts)
  opts = check_opts(fn, opts, decode_opts)
  if opts.is_real ~= nil and type(opts.is_real) ~= "boolean" then
    raise("TypeError", ("CkksEngine:%s: is_real expected a boolean, got %s"):format(fn, type(opts.is_real)))
  end
  return opts.is_real == true
end

--- engine:decode(pt, {is_real=false}) -> complex128 (or float64) tensor [*batch, num_slots]
function methods.decode(self, pt, opts)
  local pt_rns = core.is_value(pt) and pt.representation == "slots" and self:encode_plaintext(pt) or pt
  return self:_decode(pt_rns, is_real_opt("decode", opts))
end

--- engine:encrypt_message(msg, pk, {level=, scale=}) = encrypt(encode(msg), pk)
function methods.encrypt_message(self, msg, pk, opts)
  return self:encrypt(self:encode(msg, opts), pk)
end

--- engine:decrypt_message(ct, sk, {is_real=false}) -> the decoded message tensor
function methods.decrypt_message(self, ct, sk, opts)
  local real = is_real_opt("decrypt_message", opts)
  return self:_decode(self:decrypt(ct, sk), real)
end

--- Install the public names into the fh table.
function M.install(fh)
  fh.CkksEngine = core.CkksEngine
end

return M
