-- wrklib.lua — what the wrk scripts of tests/bench share, loaded with
-- dofile from the script's own directory: wrk's setup(), which gives each
-- thread its number (the thread's global id, from 1) and keeps the threads
-- in the global `threads` for done(), which runs in the main state and
-- reads their globals with thread:get().

threads = {}
local next_id = 0

function setup(thread)
	next_id = next_id + 1
	thread:set("id", next_id)
	table.insert(threads, thread)
end
