-- A spec of the matrix-vector program of examples/matrix_vector.lua, to copy
-- when you start testing your own program (docs/testing.md):
--
--   fhelium test examples/spec
--
-- y = M v for a public SIZE x SIZE matrix M and an encrypted vector v, by
-- cyclic diagonals: SIZE - 1 hoisted rotations, SIZE plaintext products, one
-- rescale. The program under test is examples/matvec.lua's, the one the
-- examples run: a function of its one dynamic input (the encrypted vector);
-- the engine, the keys and the diagonals are bound by closure, so the
-- execution layer can capture it once and replay it with new inputs.
local fh = require "fhelium"
local ex = require "fhelium.execution"
local testing = require "fhelium.testing"

-- the program under test, loaded relative to this file ---------------------------
local here = debug.getinfo(1, "S").source:match("^@(.*)/") or "."
local matvec = dofile(here .. "/../matvec.lua")

local SIZE = 4

local function matvec_program(engine, M) return matvec.program(engine, M, SIZE) end
local function encrypt_vector(engine, pk, v) return matvec.encrypt_vector(engine, pk, v, SIZE) end
local function product(M, v) return matvec.reference(M, v, SIZE) end
local function random_vector(g) return matvec.uniform(g, SIZE) end -- SIZE values in [-1, 1)

-- the specs -------------------------------------------------------------------
local rotations = {}
for i = 1, SIZE - 1 do rotations[i] = -i end

-- eager runs and replays on one device: HostGraphProgram on the CPU,
-- CudaGraphProgram on a GPU
local function check_replays(device)
  local engine, keys = testing.engine(nil, { device = device, rotations = rotations })
  local g = fh.Generator(testing.seed())
  local M = {}
  for j = 1, SIZE do M[j] = random_vector(g) end
  local program = matvec_program(engine, M)
  local Program = device == "cpu" and ex.HostGraphProgram or ex.CudaGraphProgram
  local prog = Program.capture(program, { example_inputs = { encrypt_vector(engine, keys.pk, random_vector(g)) },
    warmup = 1 })
  finally(function() prog:close() end)
  for _ = 1, 3 do
    local v = random_vector(g)
    local ct = encrypt_vector(engine, keys.pk, v)
    local eager = program(ct)
    local replayed = prog:replay({ ct }, { synchronize = true })
    assert.same_signature(eager, replayed)
    assert.tensor_near(replayed.data, eager.data) -- uint64: exact, the same launches on the same data
    assert.decrypts_to(engine, replayed, keys.sk, product(M, v), { atol = matvec.error_bound(engine.context, SIZE) })
  end
end

describe("the matrix-vector program", function()
  it("decrypts to the plaintext product", function()
    local engine, keys = testing.engine(nil, { rotations = rotations })
    local g = fh.Generator(testing.seed())
    local M = {}
    for j = 1, SIZE do M[j] = random_vector(g) end
    local v = random_vector(g)
    local y = matvec_program(engine, M)(encrypt_vector(engine, keys.pk, v))
    assert.decrypts_to(engine, y, keys.sk, product(M, v), { atol = matvec.error_bound(engine.context, SIZE) })
    assert.equal(1, y.level) -- one rescale
  end)

  it("replays its capture bit for bit like the eager run", function()
    check_replays("cpu")
  end)

  testing.gpu_it("replays its CUDA graph bit for bit like the eager run on cuda:0", function()
    check_replays("cuda:0")
  end)

  it("rejects a vector left in the coefficient domain", function()
    local engine, keys = testing.engine(nil, { rotations = rotations })
    local M = {}
    for j = 1, SIZE do M[j] = { 1, 0, 0, 0 } end
    local program = matvec_program(engine, M)
    local coefficient = engine:encrypt_message({ 1, 2, 3, 4 }, keys.pk) -- no coefficient_domain_to_ntt_domain
    assert.raises_kind("StateError", function() program(coefficient) end, "polynomial_domain")
    local prog = ex.HostGraphProgram.capture(program, { example_inputs = { encrypt_vector(engine, keys.pk,
      { 1, 2, 3, 4 }) }, warmup = 0 })
    finally(function() prog:close() end)
    local err = assert.raises_kind("CudaGraphInputError", function() prog:replay({ coefficient }) end,
      "polynomial_domain mismatch: expected ntt, got coefficient")
    assert.equal("ExecutionInputError", fh.errors.parents[err.kind])
  end)
end)
