#!/bin/bash
# kill -9 while recording (RELIABILITY.md). Usage: kill9-record.sh BIN RATE
# Starts serve recording at RATE ticks/s, scrapes /metrics after 3 s,
# kills -9 at once and counts the ticks in the capture.
BIN=$1; RATE=$2; D=$(mktemp -d); OPS=127.0.0.1:19$((RANDOM%90+10))1
$BIN serve --no-listen --synthetic-rate $RATE --record $D/cap --ops-listen $OPS --duration-s 60 >/dev/null 2>$D/err &
P=$!
for i in $(seq 1 100); do curl -s $OPS/metrics >/dev/null && break; sleep 0.1; done
sleep 3
M=$(curl -s $OPS/metrics)
kill -9 $P; wait $P 2>/dev/null
R=$(echo "$M" | awk '$1=="pricewire_recorder_written_ticks_total"{print $2}')
B=$(echo "$M" | awk '$1=="pricewire_recorder_buffered_ticks"{print $2}')
L=$(echo "$M" | awk '$1=="pricewire_recorder_lost_ticks_total"{print $2}')
N=$($BIN capture stats $D/cap 2>&1 | grep -i -m1 "records\|ticks")
echo "rate=$RATE recorded_at_scrape=$R buffered_at_scrape=$B lost=$L file: $N"
rm -rf $D
