-- fh.distributed (also require "fhelium.distributed"): one process per GPU
-- (or per CPU rank), on one host or many, started by mpirun (scripts/launch).
-- docs/distributed.md describes it in full; docs/api.md lists it.
--
--   local dist = fh.distributed.init()      -- under mpirun, or a job of one rank without it
--   dist.rank  dist.world_size  dist.local_rank  dist.device
--   local sum = dist.all_reduce(ct)         -- ciphertexts: the modular sum = homomorphic addition
--
-- Every collective takes a tree (a tensor, a CKKS value, or lists, tuples
-- and dicts of them) and returns a new tree. Before anything moves, every
-- rank's arguments are compared (the tree signature without strides, the
-- operation, its root or peer, the device kind): any difference, or an error
-- on any rank, is raised on every rank, so no rank waits for another in a
-- collective that will not happen. CPU tensors go through MPI, CUDA tensors
-- through NCCL on the current stream (engine/dist).
local core = require "fhelium.core"
local errors = require "fhelium.errors"

local M = {}

local function pack(...) return { n = select("#", ...), ... } end

local function check_opts(name, opts, allowed, argn)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    errors.raise("TypeError", ("%s: argument %d (options) expected a table, got %s"):format(name, argn, type(opts)),
      nil, 0)
  end
  for k in pairs(opts) do
    if not allowed[k] then
      local names = {}
      for n in pairs(allowed) do names[#names + 1] = n end
      table.sort(names)
      errors.raise("ValueError", ("%s: unknown option '%s' (expected %s)"):format(name, tostring(k),
        #names > 0 and table.concat(names, ", ") or "none"), nil, 0)
    end
  end
  return opts
end

local function check_rank(name, what, argn, r)
  if type(r) ~= "number" or r ~= math.floor(r) then
    errors.raise("TypeError", ("%s: argument %d (%s) expected a rank (an integer), got %s"):format(name, argn, what,
      type(r) == "number" and tostring(r) or type(r)), nil, 0)
  end
  return r
end

-- The agreement step: `ok, plan_or_err` is this rank's local outcome. Raises
-- this rank's own error, or the error every rank raises when another rank
-- failed or the arguments differ; returns the plan when every rank agrees.
local function agree(name, ok, plan, peer)
  local err = core.dist_agree(name, ok, plan, peer)
  if not ok then error(plan, 0) end
  if err then error(err, 0) end
  return plan
end

local function collective(name, op, tree, moduli, root, peer)
  local ok, plan = pcall(core.dist_prepare, name, op, tree, moduli, root)
  return agree(name, ok, plan, peer)
end

--- dist.init({device = "auto" | "cpu" | "cuda"}) -> dist. "auto" (the
--- default, or FHELIUM_DIST_DEVICE as scripts/launch sets it): "cuda" when this
--- build has NCCL and the rank has a GPU of its own, else "cpu".
function M.init(opts)
  local name = "fh.distributed.init"
  opts = check_opts(name, opts, { device = true }, 1)
  local dev = opts.device
  if dev ~= nil and type(dev) ~= "string" then
    errors.raise("TypeError", ("%s: option device expected a string, got %s"):format(name, type(dev)), nil, 2)
  end
  core.dist_init(dev)
  return M
end

--- True once init() succeeded.
function M.is_initialized() return core.dist_info().initialized end

--- Build and job facts that need no init: {built_with_mpi=, built_with_nccl=,
--- mpi_version=, nccl_version=, launcher= (started by mpirun), initialized=,
--- and after init rank=, world_size=, local_rank=, local_size=, device=, host=}.
function M.info() return core.dist_info() end

--- Wait until every rank has called barrier().
function M.barrier() core.dist_barrier() end

--- End every rank of the job now (MPI_Abort) with exit status `code` (1).
function M.abort(code)
  if code ~= nil and (type(code) ~= "number" or code ~= math.floor(code)) then
    errors.raise("TypeError", "fh.distributed.abort: argument 1 (code) expected an integer, got " .. type(code), nil, 2)
  end
  io.stdout:flush()
  io.stderr:flush()
  core.dist_abort(code or 1)
end

local sum_opts = { moduli = true }

--- dist.all_reduce(tree, {moduli=}) -> tree: the sum over ranks, leaf by
--- leaf. Ciphertexts and RNS plaintexts are summed modulo their primes
--- (homomorphic addition); uint64 tensors too with `moduli` (one per row of
--- the limb dimension, the second-to-last, as fh.rns.add); other tensors
--- and slots plaintexts by their dtype's addition.
function M.all_reduce(tree, opts)
  local name = "fh.distributed.all_reduce"
  local ok, o = pcall(check_opts, name, opts, sum_opts, 2)
  if not ok then return agree(name, false, o) end
  return core.dist_run(name, collective(name, "all_reduce", tree, o.moduli))
end

--- dist.all_gather(tree) -> {tree of rank 0, ..., tree of rank world_size-1}
function M.all_gather(tree)
  local name = "fh.distributed.all_gather"
  return core.dist_run(name, collective(name, "all_gather", tree))
end

--- dist.reduce_scatter({chunk for rank 0, ..., chunk for rank W-1}, {moduli=})
--- -> the sum over ranks of their chunk for this rank.
function M.reduce_scatter(chunks, opts)
  local name = "fh.distributed.reduce_scatter"
  local ok, o = pcall(check_opts, name, opts, sum_opts, 2)
  if not ok then return agree(name, false, o) end
  return core.dist_run(name, collective(name, "reduce_scatter", chunks, o.moduli))
end

-- The serialized path of broadcast and recv: a tree only the sender has,
-- sent as a value file (fh.serialize) and rebuilt on the receiver's device.
local function serialize(tree, opts)
  local fh = require "fhelium"
  return fh.serialize(tree, { allow_secret = opts.allow_secret == true })
end
local function deserialize(bytes, opts)
  local fh = require "fhelium"
  return fh.deserialize(bytes, { device = opts.device or M.device })
end

local bcast_opts = { allow_secret = true, device = true }

local function check_job(name)
  if not core.dist_info().initialized then
    errors.raise("StateError", name .. ": fh.distributed.init() has not been called", nil, 0)
  end
end

--- dist.broadcast(tree, root = 0, {allow_secret=false, device=}) -> the root's
--- tree on every rank. Other ranks pass a tree of the same signature (its
--- contents are ignored; the fast path, MPI_Bcast / ncclBroadcast) or nil:
--- then the root's tree travels as a value file (fh.serialize; secret keys
--- only with allow_secret) and is rebuilt on `device` (default: this rank's
--- device), its contexts looked up by id (create them on every rank).
function M.broadcast(tree, root, opts)
  local name = "fh.distributed.broadcast"
  local ok, err = pcall(function()
    opts = check_opts(name, opts, bcast_opts, 3)
    root = check_rank(name, "root", 2, root == nil and 0 or root)
    check_job(name)
    if root < 0 or root >= M.world_size then
      errors.raise("ValueError", ("%s: root %d is not a rank (expected 0 .. %d)"):format(name, root,
        M.world_size - 1), nil, 0)
    end
    if tree == nil and M.rank == root then
      errors.raise("ValueError", ("%s: argument 1 (tree) is nil on the root (rank %d): the root broadcasts its "
        .. "tree"):format(name, root), nil, 0)
    end
  end)
  -- 1. every rank is ready (same root), and whether it holds a tree
  agree(name, ok, ok and ("broadcast root=" .. tostring(root)) or err)
  local flags = core.dist_allgather_flag(name, tree ~= nil and 1 or 0)
  local with, without = {}, {}
  for r = 1, #flags do
    if r - 1 ~= root then
      if flags[r] == 1 then with[#with + 1] = r - 1 else without[#without + 1] = r - 1 end
    end
  end
  if #with > 0 and #without > 0 then
    errors.raise("ExecutionInputError", ("%s: rank%s %s pass%s a tree and rank%s %s pass%s nil (either every rank "
      .. "other than the root passes a tree of the root's signature, or every one passes nil)"):format(name,
      #with > 1 and "s" or "", table.concat(with, ", "), #with > 1 and "" or "es", #without > 1 and "s" or "",
      table.concat(without, ", "), #without > 1 and "" or "es"), nil, 2)
  end
  if #without == 0 then
    -- 2a. the fast path: equal signatures, MPI_Bcast / ncclBroadcast
    return core.dist_run(name, collective(name, "broadcast", tree, nil, root))
  end
  -- 2b. the root's tree as a value file
  local sok, bytes = true, nil
  if M.rank == root then sok, bytes = pcall(serialize, tree, opts) end
  agree(name, sok, sok and "broadcast serialized" or bytes)
  return deserialize(core.dist_broadcast_bytes(name, root, bytes), opts)
end

-- Point-to-point: both sides first exchange one flag (1: this side's
-- arguments are fine; 2: the receiver passes a template), so that both know
-- the outcome and the path before anything else moves.
local function p2p_start(name, peer, ok, err, template)
  local theirs = core.dist_exchange_flag(name, peer, (ok and 1 or 0) + (template and 2 or 0))
  if not ok or theirs % 2 == 0 then agree(name, ok, ok and "transfer" or err, peer) end
  return theirs
end

local function valid_peer(p)
  return type(p) == "number" and p == math.floor(p) and M.is_initialized() and p >= 0 and p < M.world_size
    and p ~= M.rank
end

local function check_peer(name, what, p)
  check_rank(name, what, 2, p)
  check_job(name)
  if not valid_peer(p) then
    errors.raise("ValueError", ("%s: %s %d is not another rank (expected 0 .. %d, not this rank %d)"):format(name,
      what, p, M.world_size - 1, M.rank), nil, 0)
  end
end

--- dist.send(tree, dst, {allow_secret=false}): the tree to rank dst, which
--- calls dist.recv(like, src) with src = this rank.
function M.send(tree, dst, opts)
  local name = "fh.distributed.send"
  local ok, err = pcall(function()
    opts = check_opts(name, opts, { allow_secret = true }, 3)
    check_peer(name, "dst", dst)
  end)
  if not valid_peer(dst) then error(err, 0) end -- no peer to tell
  local theirs = p2p_start(name, dst, ok, err, false)
  if theirs >= 2 then
    core.dist_run(name, collective(name, "send", tree, nil, dst, dst))
    return
  end
  local sok, bytes = pcall(serialize, tree, opts)
  agree(name, sok, sok and "transfer serialized" or bytes, dst)
  core.dist_send_bytes(name, dst, bytes)
end

--- dist.recv(like, src, {device=}) -> the tree rank src sends. `like` is a
--- tree of the sender's signature (the fast path) or nil (the sender's tree
--- arrives as a value file and is rebuilt on `device`, as in broadcast).
function M.recv(like, src, opts)
  local name = "fh.distributed.recv"
  local ok, err = pcall(function()
    opts = check_opts(name, opts, { device = true }, 3)
    check_peer(name, "src", src)
  end)
  if not valid_peer(src) then error(err, 0) end
  p2p_start(name, src, ok, err, like ~= nil)
  if like ~= nil then return core.dist_run(name, collective(name, "recv", like, nil, src, src)) end
  agree(name, true, "transfer serialized", src)
  return deserialize(core.dist_recv_bytes(name, src), opts)
end

--- Test aid (not API): dist._force_split(true) makes every modular sum take
--- the split path (low and high halves summed apart), as with W (q - 1) >= 2^64.
M._force_split = core._dist_force_split

-- rank, world_size, local_rank, local_size, device, host, launched: fields
-- of the job, answered after init (a StateError before).
local fields = { rank = true, world_size = true, local_rank = true, local_size = true, device = true, host = true,
  launched = true }
setmetatable(M, {
  -- the computed fields, for the REPL's completion (which reads raw keys and this list)
  fields = { "rank", "world_size", "local_rank", "local_size", "device", "host", "launched" },
  __index = function(_, k)
    if fields[k] then
      local info = core.dist_info()
      if not info.initialized then
        errors.raise("StateError", ("fh.distributed.%s: fh.distributed.init() has not been called"):format(k), nil, 2)
      end
      return info[k]
    end
  end,
})

package.loaded["fhelium.distributed"] = M
return M
