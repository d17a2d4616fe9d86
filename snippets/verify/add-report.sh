# on a GPU: the summary's last line names the report, written where you ran pytest
pytest examples --nanogpt ~/nanoGPT
# add it to the project: the page "How accurate is oomguide?" counts every file of that folder
cp nvidia-*.json examples/measurements/
