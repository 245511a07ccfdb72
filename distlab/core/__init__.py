"""The machinery that knows no topic: experiments and their cache, results and claims, number formatting,
facts with their sources, the site's placeholders and the `distlab` command."""
