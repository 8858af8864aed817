#!/usr/bin/env bash
# Regenerate every figure and study report in the docs that comes from committed data
# (docs/contributing-docs.md, "Figures from data"). With no arguments it rewrites them in place:
#
#   bash scripts/docs_figures.sh                        # every step, in place: docs/img/, studies/*-report/
#   bash scripts/docs_figures.sh forecast study-plots   # some steps: forecast | reports | study-plots | subsets
#   DOCS_FIGURES_OUT=DIR bash scripts/docs_figures.sh   # written under DIR/img and DIR/studies instead
#
# forecast     docs/img/forecast.png: the fit of the shipped example run (examples/synthetic-8b)
# reports      studies/<name>-report/: each committed study's report, by the command its report.md names
#              (with --report-only: nothing is trained), from the finished runs committed in studies/<name>/;
#              the files the report folder holds are replaced (10 minutes on a loaded 2-core machine)
# study-plots  docs/img/studies/*.png: the study plots docs/study.md shows, copied from the reports
# subsets      docs/img/ladder-subsets.png: per-rung curves of three committed runs (docs/history/study-history.md)
# Figures of runs that are not committed (memory, SmolLM2, two-domain) are not regenerated: their pages say so.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${DOCS_FIGURES_OUT:-}
STEPS=${*:-forecast reports study-plots subsets}
IMG=${OUT:+$OUT/img}; IMG=${IMG:-docs/img}
STUDIES=${OUT:+$OUT/studies}; STUDIES=${STUDIES:-studies}
SCALERL=${SCALERL:-scalerl}
PYTHON=${PYTHON:-python}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$IMG/studies" "$STUDIES"

for step in $STEPS; do
  case $step in
    forecast)
      $SCALERL fit examples/synthetic-8b --fit-min 1500 --fit-max 8000 --predict 16000 32000 --plot "$TMP/forecast.png"
      cp "$TMP/forecast.png" "$IMG/forecast.png" ;;
    reports)
      for report in studies/*-report studies/*-report-*; do
        name=$(basename "$report")
        command=$(grep -A3 -m1 '^Regenerate with' "$report/report.md" | grep '^scalerl ablate')
        [[ $command == *--report-only* ]] || command="$command --report-only"
        [[ $command == *" --out "* ]] || command="$command --out runs/$name"
        out=$(sed -e 's/.* --out \([^ ]*\).*/\1/' <<< "$command")   # as the report names it; written in $TMP
        echo "$name: $command"
        $SCALERL ${command#scalerl } --out "$TMP/$name" > "$TMP/$name.log"
        sed -i -e "s# --out $TMP/$name##" "$TMP/$name/report.md" "$TMP/$name/report.json"
        mkdir -p "$STUDIES/$name"
        for kept in "$report"/*; do        # the files the folder holds; one the command does not make stays as it is
          if [[ -e $TMP/$name/$(basename "$kept") ]]; then cp "$TMP/$name/$(basename "$kept")" "$STUDIES/$name/"
          else echo "$name: $(basename "$kept") is not made by the report command: left as it is"; fi
        done
      done ;;
    study-plots)
      for pair in recipes-report/fits_recipes recipes-report/fits_leave_one_out ksweep-report-hours/fits axes-report/fits; do
        src="$STUDIES/${pair%%/*}"
        [[ -d $src ]] || src="studies/${pair%%/*}"       # the committed report when OUT holds none
        cp "$src/${pair#*/}.png" "$IMG/studies/${pair%%/*}-${pair#*/}.png"
      done ;;
    subsets)
      $PYTHON docs/img/plot_subsets.py "$IMG/ladder-subsets.png" studies/history/controls-358/base/seed0 \
        studies/history/controls-358/think-short/seed0 studies/history/controls-358-lr1e-4/base/seed0 ;;
    *) echo "scripts/docs_figures.sh: unknown step '$step' (expected forecast, reports, study-plots or subsets)" >&2
       exit 2 ;;
  esac
done
echo "figures written under ${OUT:-docs/img and studies}"
