-- fh.distributed: one process per GPU or per CPU rank (docs/distributed.md).
-- In this process: a job of one rank (no launcher), its checks and errors.
-- Under mpirun (scripts/launch, CPU ranks, as CI runs them): every
-- collective on tensors and ciphertexts, the modular sums against local
-- sums, errors raised on every rank, captured programs (the ranks' side is
-- spec/support/dist_worker.lua), ranks that fail, and the launcher. GPU
-- specs run the same cases over NCCL and compare them with the CPU ranks.
local fh = require "fhelium"
local ex = fh.execution
local cli = require "spec.support.cli"
local H = require "spec.helpers"
local dist = fh.distributed
local info = dist.info()

local TIMEOUT = 300 -- seconds a job may take before the spec calls it a hang

-- a spec that needs `n` CUDA devices (and NCCL); skipped elsewhere with the reason
local function multi_gpu_it(n, name, fn)
  local have = fh.cuda.device_count()
  if not info.built_with_nccl then
    return H.skip_it(name .. " #gpu", ("needs %d CUDA devices and NCCL: this build has no NCCL"):format(n))
  end
  if have < n then
    return H.skip_it(name .. " #gpu", ("needs %d CUDA devices: %s"):format(n, have == 0 and
      ("none is usable here (" .. fh.cuda.unavailable_reason() .. ")") or ("this machine has " .. have)))
  end
  return getfenv(2).it(name .. " #gpu", fn)
end

local function mpi_it(name, fn)
  if not info.built_with_mpi then return H.skip_it(name, "needs MPI: this build has none (libopenmpi-dev)") end
  return getfenv(2).it(name, fn)
end

-- a gpu spec that starts ranks with scripts/launch
local function gpu_mpi_it(name, fn)
  if not info.built_with_mpi then return H.skip_it(name .. " #gpu", "needs MPI: this build has none (libopenmpi-dev)") end
  return H.gpu_it(name, fn)
end

local function launch(args, opts)
  local words = { "timeout", tostring(TIMEOUT), cli.quote(cli.root .. "/scripts/launch") }
  for _, a in ipairs(args) do words[#words + 1] = cli.quote(a) end
  return cli.sh(table.concat(words, " "), opts)
end

describe("fh.distributed in one process (a job of one rank, no launcher)", function()
  it("answers info() and refuses everything else before init()", function()
    assert.is_false(info.initialized)
    assert.is_false(info.launcher)
    assert.is_boolean(info.built_with_mpi)
    assert.is_false(dist.is_initialized())
    H.expect_error("StateError", "^fh%.distributed%.rank: fh%.distributed%.init%(%) has not been called",
      function() return dist.rank end)
    H.expect_error("StateError", "^fh%.distributed%.all_reduce: fh%.distributed%.init%(%) has not been called",
      dist.all_reduce, fh.ones({ 2 }))
    H.expect_error("StateError", "^fh%.distributed%.barrier: ", dist.barrier)
    H.expect_error("StateError", "^fh%.distributed%.broadcast: ", dist.broadcast, fh.ones({ 2 }))
    H.expect_error("StateError", "^fh%.distributed%.send: ", dist.send, fh.ones({ 2 }), 1)
  end)

  it("init() checks its options", function()
    H.expect_error("ValueError", "^fh%.distributed%.init: option device is 'gpu'", dist.init, { device = "gpu" })
    H.expect_error("TypeError", "^fh%.distributed%.init: option device expected a string", dist.init, { device = 1 })
    H.expect_error("ValueError", "^fh%.distributed%.init: unknown option 'devcie'", dist.init, { devcie = "cpu" })
    H.expect_error("TypeError", "argument 1 %(options%) expected a table", dist.init, "cpu")
    if not fh.cuda.is_available() then
      -- a failed init changes nothing: init() below still works
      H.expect_error("CudaError", info.built_with_nccl and
        '^fh%.distributed%.init: device "cuda": rank 0 has no CUDA device: ' or
        '^fh%.distributed%.init: device "cuda": fhelium was built without NCCL', dist.init, { device = "cuda" })
    end
    assert.is_false(dist.is_initialized())
  end)

  it("init() takes the device kind from FHELIUM_DIST_DEVICE (scripts/launch sets it) and checks it", function()
    local r = cli.run({ "-e", 'local d = require("fhelium").distributed.init() print(d.device)' },
      { env = { FHELIUM_DIST_DEVICE = "cpu" } })
    assert.equal(0, r.code, r.stderr)
    assert.equal("cpu\n", r.stdout)
    r = cli.run({ "-e", 'require("fhelium").distributed.init()' }, { env = { FHELIUM_DIST_DEVICE = "gpu" } })
    assert.equal(1, r.code)
    assert.truthy(r.stderr:find('ValueError: fh.distributed.init: FHELIUM_DIST_DEVICE is \'gpu\' (expected "cpu", ' ..
      '"cuda" or "auto")', 1, true), r.stderr)
  end)

  it("init() makes this process rank 0 of 1 on its device", function()
    assert.equal(dist, dist.init())
    assert.is_true(dist.is_initialized())
    assert.equal(0, dist.rank)
    assert.equal(1, dist.world_size)
    assert.equal(0, dist.local_rank)
    assert.equal(1, dist.local_size)
    assert.is_false(dist.launched)
    assert.equal(info.built_with_nccl and fh.cuda.is_available() and "cuda:0" or "cpu", dist.device)
    assert.equal(dist, dist.init()) -- again: a no-op
    local other = dist.device == "cpu" and "cuda" or "cpu"
    H.expect_error("StateError", "already initialised with device", dist.init, { device = other })
    dist.barrier()
  end)

  it("runs every collective as a copy on one rank", function()
    local t = fh.arange(6, { dtype = "int64" }):view({ 2, 3 })
    local tree = { a = t:transpose(1, 2), b = { ex.tuple(fh.ones({ 2 })) } }
    local s = dist.all_reduce(tree)
    assert.is_true(fh.equal(s.a, t:transpose(1, 2)))
    assert.is_true(s.a:is_contiguous())
    assert.is_true(ex.is_tuple(s.b[1]))
    local g = dist.all_gather(t)
    assert.equal(1, #g)
    assert.is_true(fh.equal(g[1], t))
    assert.is_true(fh.equal(dist.broadcast(t, 0), t))
    assert.is_true(fh.equal(dist.reduce_scatter({ t }), t))
    local d = dist.broadcast(nil and t or { t }, 0, { allow_secret = false })
    assert.is_true(fh.equal(d[1], t))
  end)

  it("sums residues modulo their primes, by either path (the split one forced)", function()
    local q = { 4611686018427387847ULL, 3ULL }
    local x = fh.tensor({ { q[1] - 1ULL, 5ULL }, { 2ULL, 1ULL } }, { dtype = "uint64" })
    for _, split in ipairs { false, true } do
      dist._force_split(split)
      local ok, r = pcall(dist.all_reduce, x, { moduli = q })
      dist._force_split(false)
      assert(ok, tostring(r))
      assert.same(x:tolist(), r:tolist())
    end
    local e = fh.CkksEngine({ log_n = 10, q_bits = { 40, 40, 60 }, p_bits = { 60 }, allow_insecure = true }, { seed = 2 })
    local sk = e:create_secret_key()
    local ct = e:encrypt_message({ 1, 2 }, e:create_public_key(sk))
    dist._force_split(true)
    local ok, r = pcall(dist.all_reduce, { ct = ct })
    dist._force_split(false)
    assert(ok, tostring(r))
    assert.is_true(fh.value_equal(r.ct, ct))
  end)

  it("refuses bad arguments with errors that name the function and the argument", function()
    H.expect_error("TypeError", "^fh%.distributed%.all_reduce: tree: unsupported leaf: a number", dist.all_reduce, 3)
    H.expect_error("TypeError", "^fh%.distributed%.all_reduce: tensor 1 is bool, which has no sum", dist.all_reduce,
      fh.zeros({ 2 }, { dtype = "bool" }))
    H.expect_error("TypeError", "^fh%.distributed%.reduce_scatter: tensor 1 is bool", dist.reduce_scatter,
      { fh.zeros({ 2 }, { dtype = "bool" }) })
    H.expect_error("ValueError", "^fh%.distributed%.all_reduce: unknown option 'modulus' %(expected moduli%)",
      dist.all_reduce, fh.ones({ 2 }), { modulus = { 3 } })
    H.expect_error("TypeError", "option moduli expected a list of integers, got number", dist.all_reduce,
      fh.ones({ 2 }), { moduli = 3 })
    H.expect_error("ValueError", "option moduli has 0 entries", dist.all_reduce, fh.ones({ 2 }), { moduli = {} })
    H.expect_error("TypeError", "option moduli%[2%] expected a non%-negative integer", dist.all_reduce,
      fh.ones({ 2 }), { moduli = { 3, -1 } })
    H.expect_error("TypeError", "a modular sum needs uint64 residues; tensor 1 is float32", dist.all_reduce,
      fh.ones({ 1, 2 }), { moduli = { 3 } })
    H.expect_error("ValueError", "a modular sum needs tensors %[%*, limb, n%]; tensor 1 has 1 dimension",
      dist.all_reduce, fh.ones({ 2 }, { dtype = "uint64" }), { moduli = { 3 } })
    H.expect_error("ValueError", "2 moduli given for tensor 1's 1 limb rows", dist.all_reduce,
      fh.ones({ 1, 2 }, { dtype = "uint64" }), { moduli = { 3, 5 } })
    H.expect_error("ValueError", "modulus 1 of tensor 1 is 1; moduli must satisfy 2 <= q < 2%^62", dist.all_reduce,
      fh.ones({ 1, 2 }, { dtype = "uint64" }), { moduli = { 1 } })
    H.expect_error("ValueError", "^fh%.distributed%.reduce_scatter: argument 1 %(chunks%) has 2 chunks for 1 ranks",
      dist.reduce_scatter, { fh.ones({ 1 }), fh.ones({ 1 }) })
    H.expect_error("ValueError", "argument 1 %(chunks%) expected a list of 1 trees", dist.reduce_scatter,
      { a = fh.ones({ 1 }) })
    H.expect_error("ValueError", "^fh%.distributed%.broadcast: root 1 is not a rank %(expected 0 .. 0%)",
      dist.broadcast, fh.ones({ 1 }), 1)
    H.expect_error("TypeError", "^fh%.distributed%.broadcast: argument 2 %(root%) expected a rank", dist.broadcast,
      fh.ones({ 1 }), "0")
    H.expect_error("ValueError", "argument 1 %(tree%) is nil on the root", dist.broadcast, nil, 0)
    H.expect_error("ValueError", "^fh%.distributed%.send: dst 0 is not another rank", dist.send, fh.ones({ 1 }), 0)
    H.expect_error("ValueError", "^fh%.distributed%.recv: src 1 is not another rank", dist.recv, nil, 1)
    H.expect_error("TypeError", "^fh%.distributed%.abort: argument 1 %(code%)", dist.abort, "x")
    -- a CPU collective moves at most 2^31 - 1 elements per tensor (checked before anything is allocated)
    H.expect_error("ValueError", "tensor 1 has 2147483648 elements; a CPU collective moves at most 2147483647",
      dist.all_gather, fh.zeros({ 1 }):expand({ 2 ^ 31 }))
    H.expect_error("ValueError", "at most 1073741823 per tensor %(MPI counts are int%) for a modular sum",
      dist.all_reduce, fh.zeros({ 1, 1 }, { dtype = "uint64" }):expand({ 2 ^ 30, 1 }), { moduli = { 3 } })
    -- keys move but are not summed
    local e = fh.CkksEngine({ log_n = 10, q_bits = { 40, 40, 60 }, p_bits = { 60 }, allow_insecure = true }, { seed = 3 })
    local sk = e:create_secret_key()
    H.expect_error("TypeError", "a SecretKey is not summed", dist.all_reduce, { sk })
    assert.is_true(fh.value_equal(dist.broadcast({ sk }, 0)[1], sk))
  end)

  -- a build without NCCL (no nccl.h where it was built) has no GPU collectives to check
  local nccl_it = info.built_with_nccl and H.gpu_it or function(name)
    return H.skip_it(name, "this build has no NCCL (nccl.h where it was built: README \"On the GPU machine\")")
  end
  nccl_it("runs collectives on cuda:0 through a one-rank NCCL communicator, also inside a CudaGraphProgram",
    function()
      dist.init() -- a no-op after the specs above; run alone (--tags=gpu) it starts the job of one rank here
      assert.equal("cuda:0", dist.device)
      local x = fh.arange(8, { dtype = "float64", device = "cuda" })
      assert.is_true(fh.equal(dist.all_reduce(x):cpu(), x:cpu()))
      local q = { 4611686018427387847ULL }
      local r = fh.tensor({ { q[1] - 1ULL, 7ULL } }, { dtype = "uint64", device = "cuda" })
      dist._force_split(true)
      local ok, s = pcall(dist.all_reduce, r, { moduli = q })
      dist._force_split(false)
      assert(ok, tostring(s))
      assert.same(r:cpu():tolist(), s:cpu():tolist())
      local prog = ex.CudaGraphProgram.capture(function(t) return dist.all_reduce(t * 2) end,
        { example_inputs = { x }, warmup = 1 })
      assert.is_true(fh.equal(prog:replay({ x }, { synchronize = true }):cpu(), (x * 2):cpu()))
      prog:close()
      H.expect_error("ValueError", "one device per collective", dist.all_reduce, { x, fh.ones({ 1 }) })
      if fh.cuda.device_count() > 1 then
        H.expect_error("ValueError", "tensor 1 is on cuda:1; this rank's GPU is cuda:0", dist.all_reduce,
          fh.ones({ 1 }, { device = "cuda:1" }))
      end
    end)
end)

-- ---- under mpirun ---------------------------------------------------------------------------------
local function run_worker(n, device)
  local r = launch({ "-n", tostring(n), "--device", device, "spec/support/dist_worker.lua", tostring(n) },
    { cwd = cli.root })
  local res, order = {}, {}
  for line in (r.stdout .. "\n"):gmatch("([^\n]*)\n") do
    local name, rank, rest = line:match("^case (%S+) rank (%d+) (.*)$")
    if name then
      if not res[name] then
        res[name] = {}
        order[#order + 1] = name
      end
      res[name][tonumber(rank)] = rest
    end
  end
  return { r = r, res = res, order = order }
end

-- the cases of spec/support/dist_worker.lua, in its order
local CASES = { "job", "all_reduce_dtypes", "all_reduce_views_and_trees", "all_gather", "broadcast",
  "broadcast_serialized", "reduce_scatter", "send_recv", "modular_tensors", "modular_ciphertexts", "errors", "programs" }

local function check_case(job, n, name)
  assert.equal(0, job.r.code, "the job failed:\n" .. job.r.stdout .. job.r.stderr)
  local per = job.res[name]
  assert(per, "no rank reported case " .. name .. ":\n" .. job.r.stdout .. job.r.stderr)
  local digest
  for rank = 0, n - 1 do
    local rest = per[rank]
    assert(rest, ("rank %d did not report case %s"):format(rank, name))
    assert(rest:match("^ok"), ("rank %d: %s"):format(rank, rest))
    local d = rest:match("digest (%S+)")
    if rank == 0 then digest = d else assert.equal(digest, d, "ranks disagree on the results of " .. name) end
  end
  return digest
end

local cpu_digests = {}
for _, n in ipairs { 2, 3 } do
  describe(("fh.distributed on %d CPU ranks (scripts/launch -n %d --device cpu)"):format(n, n), function()
    local job
    local function get()
      job = job or run_worker(n, "cpu")
      return job
    end
    for _, name in ipairs(CASES) do
      mpi_it(("case %s: every rank succeeds with the same results"):format(name), function()
        local d = check_case(get(), n, name)
        cpu_digests[n] = cpu_digests[n] or {}
        cpu_digests[n][name] = d
      end)
    end
  end)
end

describe("fh.distributed over NCCL (one rank per GPU)", function()
  for _, n in ipairs { 2, 4 } do
    multi_gpu_it(n, ("every case on %d GPU ranks succeeds, with results identical to the CPU ranks"):format(n),
      function()
        local job = run_worker(n, "cuda")
        local cpu = n == 2 and cpu_digests[2] or run_worker(n, "cpu")
        for _, name in ipairs(CASES) do
          local d = check_case(job, n, name)
          local want = n == 2 and cpu[name] or check_case(cpu, n, name)
          assert.equal(want, d, ("case %s: CUDA ranks differ from CPU ranks"):format(name))
        end
      end)
  end
end)

describe("fh.distributed.init on GPU ranks", function()
  gpu_mpi_it("refuses, on every rank, kinds that differ between ranks and more ranks on a host than GPUs", function()
    local n = fh.cuda.device_count() + 1
    local script = cli.tempfile([[
      local fh = require "fhelium"
      local dist = fh.distributed
      local rank = tonumber(os.getenv("OMPI_COMM_WORLD_RANK"))
      local ok, e = pcall(dist.init, { device = rank == 0 and "cuda" or "cpu" })
      print(("mixed %d %s %s"):format(rank, tostring(ok), ok and "" or e.kind .. ": " .. e.message))
      ok, e = pcall(dist.init, { device = "cuda" })
      print(("cuda %d %s %s"):format(rank, tostring(ok), ok and "" or e.kind .. ": " .. e.message))
      dist.init({ device = "cpu" })
      local x = fh.ones({ 1 }, { device = "cuda:0" })
      ok, e = pcall(dist.all_reduce, x)
      print(("tensor %d %s %s"):format(rank, tostring(ok), ok and "" or e.kind .. ": " .. e.message))
    ]], ".lua")
    local r = launch({ "-n", tostring(n), "--device", "cpu", script }, { cwd = cli.root })
    os.remove(script)
    assert.equal(0, r.code, r.stdout .. r.stderr)
    for rank = 0, n - 1 do
      assert.truthy(r.stdout:find(("mixed %d false ExecutionInputError: fh.distributed.init: the ranks' arguments differ"):format(
        rank), 1, true), r.stdout)
      local own = rank == n - 1 and ("CudaError: fh.distributed.init: device \"cuda\": rank %d is local rank %d of host")
        :format(rank, rank) or ("CudaError: fh.distributed.init: rank %d failed"):format(n - 1)
      assert.truthy(r.stdout:find(("cuda %d false %s"):format(rank, own), 1, true), r.stdout)
      assert.truthy(r.stdout:find(("tensor %d false StateError: fh.distributed.all_reduce: tensor 1 is on cuda:0, but this "
        .. "job was initialised for CPU ranks"):format(rank), 1, true), r.stdout)
    end
  end)
end)

describe("a rank that fails ends the job", function()
  mpi_it("an uncaught error on one rank: its message names the rank, the job ends with status 1", function()
    local r = launch({ "-n", "2", "--device", "cpu", "spec/support/dist_failing.lua", "raise" }, { cwd = cli.root })
    assert.are_not.equal(124, r.code, "the job hung")
    assert.equal(1, r.code, r.stderr)
    assert.truthy(r.stderr:find("fhelium: rank 1 of 2 %(.-%): ValueError: rank 1 gives up before the all_reduce"),
      r.stderr)
    assert.truthy(r.stderr:find("fhelium: rank 1 failed: ending every rank of the job (MPI_Abort)", 1, true))
    assert.truthy(r.stderr:find("launch: the job failed with exit status 1", 1, true))
    assert.falsy(r.stdout:find("was not stopped", 1, true), r.stdout)
  end)

  mpi_it("fh.distributed.abort(code) ends every rank with that status", function()
    local r = launch({ "-n", "2", "--device", "cpu", "spec/support/dist_failing.lua", "abort" }, { cwd = cli.root })
    assert.are_not.equal(124, r.code, "the job hung")
    assert.equal(3, r.code, r.stderr)
    assert.truthy(r.stderr:find("rank 1 aborts", 1, true), r.stderr)
    assert.truthy(r.stderr:find("launch: the job failed with exit status 3", 1, true), r.stderr)
    assert.falsy(r.stdout:find("was not stopped", 1, true), r.stdout)
  end)

  mpi_it("a rank killed by a signal: mpirun stops the others and says which rank died", function()
    local r = launch({ "-n", "2", "--device", "cpu", "spec/support/dist_failing.lua", "kill" }, { cwd = cli.root })
    assert.are_not.equal(124, r.code, "the job hung")
    assert.are_not.equal(0, r.code)
    assert.truthy(r.stderr:find("rank 1 with PID %d+ on node %S+ exited on signal 9"), r.stderr)
    assert.truthy(r.stderr:find("launch: the job failed with exit status", 1, true))
    assert.falsy(r.stdout:find("was not stopped", 1, true), r.stdout)
  end)
end)

describe("scripts/launch", function()
  mpi_it("runs mpirun with fhelium's environment, NVLink multicast off (--dry-run)", function()
    local r = launch({ "-n", "3", "--device", "cpu", "--dry-run", "x.lua", "a" }, { cwd = cli.root })
    assert.equal(0, r.code, r.stderr)
    local cmd = r.stdout
    assert.truthy(cmd:find("^mpirun "), cmd)
    assert.truthy(cmd:find(" -n 3 ", 1, true))
    for _, v in ipairs { "NCCL_NVLS_ENABLE", "FHELIUM_DIST_DEVICE", "LUA_PATH", "LUA_CPATH", "FHELIUM_LUA_DIR", "PATH" } do
      assert.truthy(cmd:find("-x " .. v .. " ", 1, true), v)
    end
    assert.truthy(cmd:find("--oversubscribe --bind-to none", 1, true))
    assert.truthy(cmd:find(cli.bin .. " x.lua a", 1, true), cmd)
    assert.truthy(cmd:find("NCCL_NVLS_ENABLE=0 FHELIUM_DIST_DEVICE=cpu", 1, true))
    local uid = io.popen("id -u"):read("*l")
    assert.equal(uid == "0", cmd:find("--allow-run-as-root", 1, true) ~= nil)
    local hf = cli.tempfile("localhost slots=2\n")
    r = launch({ "--hostfile", hf, "--device", "cpu", "--dry-run", "x.lua" }, { cwd = cli.root })
    os.remove(hf)
    assert.equal(0, r.code, r.stderr)
    assert.truthy(r.stdout:find("--hostfile " .. hf, 1, true), r.stdout)
  end)

  mpi_it("refuses what it cannot run, with exit status 2", function()
    local cases = {
      { {}, "no script given" },
      { { "--device", "cpu", "x.lua" }, "CPU ranks need %-n N" },
      { { "-n", "0", "x.lua" }, "%-n expects a positive number of ranks, got '0'" },
      { { "--device", "tpu", "x.lua" }, "%-%-device expects auto, cpu or cuda, got 'tpu'" },
      { { "--hostfile", "/nonexistent/hosts", "x.lua" }, "cannot read the host file" },
      { { "--frobnicate", "x.lua" }, "unknown option '%-%-frobnicate'" },
    }
    if fh.cuda.device_count() == 0 then
      cases[#cases + 1] = { { "--device", "cuda", "x.lua" }, fh.distributed.info().built_with_nccl and
        "%-%-device cuda: no usable CUDA device" or "%-%-device cuda: this fhelium was built without NCCL" }
    end
    for _, c in ipairs(cases) do
      local r = launch(c[1], { cwd = cli.root })
      assert.equal(2, r.code, table.concat(c[1], " ") .. ": " .. r.stderr)
      assert.truthy(r.stderr:find("launch: " .. c[2]), r.stderr)
    end
  end)
end)

describe("examples/distributed_matrix_vector.lua", function()
  local function check_output(r, n, runs)
    assert.equal(0, r.code, r.stdout .. r.stderr)
    assert.truthy(r.stdout:find(("size 8, %d rank%s, device cpu"):format(n, n == 1 and "" or "s"), 1, true), r.stdout)
    local nrun = 0
    for line in r.stdout:gmatch("run %d+: [^\n]*") do
      nrun = nrun + 1
      assert.truthy(line:find("bit%-identical to the one%-rank program: yes: ok$"), line)
    end
    assert.equal(runs, nrun, r.stdout)
    -- one row per rank: its block of diagonals (together 0..7, in order) and its times
    local next_diag, rows = 0, 0
    for rank, a, b in r.stdout:gmatch("\n(%d+)%s+(%d+)%.%.(%d+)%s+[%d.]+%s+[%d.]+") do
      assert.equal(rows, tonumber(rank))
      assert.equal(next_diag, tonumber(a))
      next_diag, rows = tonumber(b) + 1, rows + 1
    end
    assert.equal(n, rows, r.stdout)
    assert.equal(8, next_diag)
    assert.truthy(r.stdout:find(("scaling: one rank [%%d.]+ ms, %d ranks [%%d.]+ ms .-: speedup [%%d.]+x"):format(n)),
      r.stdout)
    assert.truthy(r.stdout:find("): PASS\n", 1, true), r.stdout)
  end

  for _, c in ipairs { { 2, 2 }, { 3, 1 } } do
    mpi_it(("on %d CPU ranks: each rank's captured partial sum, one modular all-reduce, rank 0's checks pass"):format(
      c[1]), function()
      local r = launch({ "-n", tostring(c[1]), "--device", "cpu", "examples/distributed_matrix_vector.lua", "--runs",
        tostring(c[2]) }, { cwd = cli.root })
      check_output(r, c[1], c[2])
    end)
  end

  mpi_it("exits 1 when rank 0's check fails (--inject-error)", function()
    local r = launch({ "-n", "2", "--device", "cpu", "examples/distributed_matrix_vector.lua", "--runs", "1",
      "--inject-error", "0.5" }, { cwd = cli.root })
    assert.equal(1, r.code, r.stdout .. r.stderr)
    assert.truthy(r.stdout:find("run 1: error 5%.%d+e%-01 .-: FAILED"), r.stdout)
    assert.truthy(r.stdout:find("): FAIL\n", 1, true), r.stdout)
  end)

  for _, n in ipairs { 2, 4 } do
    multi_gpu_it(n, ("on %d GPU ranks (CudaGraphProgram per rank), size 64: bit-identical to the one-rank program"):format(
      n), function()
      local r = launch({ "-n", tostring(n), "--device", "cuda", "examples/distributed_matrix_vector.lua", "--size",
        "64", "--runs", "2" }, { cwd = cli.root })
      assert.equal(0, r.code, r.stdout .. r.stderr)
      assert.truthy(r.stdout:find("CudaGraphProgram", 1, true), r.stdout)
      assert.truthy(r.stdout:find("): PASS\n", 1, true), r.stdout)
    end)
  end
end)
