-- A spec of the matrix-vector program of examples/matrix_vector.lua, to copy
-- when you start testing your own program (docs/testing.md):
--
--   fhelium test examples/spec
--
-- y = M v for a public SIZE x SIZE matrix M and an encrypted vector v, by
-- cyclic diagonals: SIZE rotations, SIZE plaintext products, one rescale.
-- The program is a function of its one dynamic input (the encrypted
-- vector); the engine, the keys and the diagonals are bound by closure, so
-- the execution layer can capture it once and replay it with new inputs.
local fh = require "fhelium"
local ex = require "fhelium.execution"
local testing = require "fhelium.testing"

local SIZE = 4

-- the program under test ------------------------------------------------------
local function matvec_program(engine, M)
  local diagonals = {}
  for i = 0, SIZE - 1 do
    local d = {}
    for j = 0, SIZE - 1 do d[j + 1] = M[j + 1][(j + i) % SIZE + 1] end
    diagonals[i] = engine:prepare_plaintext_for_multiplication(engine:encode(d))
  end
  return function(ct_v)
    local acc
    for i = 0, SIZE - 1 do
      local rotated = i == 0 and ct_v or engine:rotate_by_step(ct_v, -i)
      local term = engine:multiply_plaintext(rotated, diagonals[i])
      acc = acc and engine:add(acc, term) or term
    end
    return engine:rescale_to_next_level(acc)
  end
end

-- [v, v, 0, ...]: a left rotation by i then wraps modulo SIZE
local function encrypt_vector(engine, pk, v)
  local slots = {}
  for j = 1, SIZE do slots[j], slots[SIZE + j] = v[j], v[j] end
  return engine:coefficient_domain_to_ntt_domain(engine:encrypt_message(slots, pk))
end

local function product(M, v)
  local y = {}
  for j = 1, SIZE do
    y[j] = 0
    for k = 1, SIZE do y[j] = y[j] + M[j][k] * v[k] end
  end
  return y
end

local function random_vector(g) -- SIZE values in [-1, 1)
  return (fh.rand({ SIZE }, { generator = g, dtype = "float64" }) * 2 - 1):tolist()
end

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
    assert.decrypts_to(engine, replayed, keys.sk, product(M, v), { atol = 1e-6 })
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
    assert.decrypts_to(engine, y, keys.sk, product(M, v), { atol = 1e-6 })
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
