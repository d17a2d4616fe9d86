# the processes that hold memory on the card, with their PIDs
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
# end one of them: its PID from the list above
PID=12345
kill "$PID"
