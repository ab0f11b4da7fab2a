#!/bin/sh
# make_kjv_genesis.sh: writes kjv_genesis.jsonl beside itself, the Book of Genesis of the King
# James Version (public domain) cut into one record a verse, {"ref": "Genesis C:V", "text": "..."}
# (1533 records), and kjv_genesis_sft.jsonl, the same verses as prompt-completion records
# {"prompt": "Genesis C:V says:", "completion": " ..."} (supervised fine-tuning's form: only the
# completion carries loss). A one-off, by hand: the text comes from Debian's bible-kjv package
# (apt-get install bible-kjv), which the product and its tests never need; they read the files.
set -eu
cd "$(dirname "$0")"
command -v bible >/dev/null || { echo "make_kjv_genesis: needs Debian's bible-kjv (apt-get install bible-kjv)" >&2; exit 1; }
bible -f gen1:1-50:26 | awk '
  function esc(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return s }
  match($0, /^Ge[0-9]+:[0-9]+ /) {
    ref = substr($0, 3, RLENGTH - 3); text = substr($0, RLENGTH + 1)
    printf "{\"ref\": \"Genesis %s\", \"text\": \"%s\"}\n", ref, esc(text) > "kjv_genesis.jsonl"
    printf "{\"prompt\": \"Genesis %s says:\", \"completion\": \" %s\"}\n", ref, esc(text) > "kjv_genesis_sft.jsonl"
  }'
echo "make_kjv_genesis: $(wc -l < kjv_genesis.jsonl) records in kjv_genesis.jsonl and kjv_genesis_sft.jsonl"
