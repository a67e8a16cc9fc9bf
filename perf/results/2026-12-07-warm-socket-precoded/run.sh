#!/bin/sh
# The A/B of this run: /tmp/warm-a = git archive d9a96c1 (the tree before) with this
# commit's perf/warmsocket.py, /tmp/warm-b = git archive of the tree after; each with the
# built cached/ldap/_ber*.so copied in. Run as: flock /work/perf.lock sh run.sh
PY=/work/wt/warm/.venv/bin/python
OUT=/tmp/warm-res
echo "start $(date -u) $(uptime)" >> $OUT/log.txt
touch $OUT/running
ws_round() {
  round=$1
  if [ $((round % 2)) = 1 ]; then order="a b"; else order="b a"; fi
  for shape in "--shape flat" "--shape flat --commits" "--shape nested" "--shape nested --commits"; do
    for side in $order; do
      res=$(cd /tmp/warm-$side && PYTHONPATH=/tmp/warm-$side timeout 300 $PY -m perf.warmsocket --reps 9 $shape 2>&1 | tail -1)
      echo "round $round side $side $shape | load $(cut -d' ' -f1-3 /proc/loadavg) | $res" >> $OUT/warmsocket.txt
    done
  done
}
ws_round 1
echo "ab start $(date -u) $(uptime)" >> $OUT/log.txt
cd /work/wt/warm && timeout 1200 $PY -m perf.ab --a d9a96c1 --b /tmp/warm-b --scenarios cold-id,warm-id --rounds 7 --out $OUT/ab.txt > $OUT/ab-stdout.txt 2>&1
echo "ab rc $? end $(date -u) $(uptime)" >> $OUT/log.txt
for shape in "--shape flat" "--shape flat --commits" "--shape nested --commits"; do
  (cd /tmp/warm-b && PYTHONPATH=/tmp/warm-b timeout 300 $PY -m perf.warmsocket --reps 5 --profile $shape > "$OUT/profile-b$(echo $shape | tr ' ' '_').txt" 2>&1)
done
(cd /tmp/warm-a && PYTHONPATH=/tmp/warm-a timeout 300 $PY -m perf.warmsocket --reps 5 --profile --shape nested --commits > "$OUT/profile-a--shape_nested_--commits.txt" 2>&1)
ws_round 2
ws_round 3
echo "end $(date -u) $(uptime)" >> $OUT/log.txt
rm -f $OUT/running
