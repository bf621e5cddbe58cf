-- Ranks that fail, for spec/distributed_spec.lua ("a rank that dies ends
-- the job"): scripts/launch -n 2 spec/support/dist_failing.lua <mode>
--   raise: rank 1 raises an error the script does not catch while rank 0
--          waits for it in a collective
--   kill:  rank 1 is killed (SIGKILL) while rank 0 waits for it
--   abort: rank 1 calls fh.distributed.abort(3)
-- Either way the job must end (not hang) with a clear message.
local fh = require "fhelium"
local ffi = require "ffi"
local dist = fh.distributed.init()
local mode = arg[1]
if dist.rank == 1 then
  if mode == "raise" then
    error(fh.errors.new("ValueError", "rank 1 gives up before the all_reduce"))
  elseif mode == "abort" then
    io.stderr:write("rank 1 aborts\n")
    dist.abort(3)
  elseif mode == "kill" then
    ffi.cdef "int getpid(void); int kill(int pid, int sig);"
    ffi.C.kill(ffi.C.getpid(), 9)
  end
end
dist.all_reduce(fh.ones({ 1 }))
print("rank " .. dist.rank .. " was not stopped")
