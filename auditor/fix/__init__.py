"""From finding to fix: `auditor fix` searches the fewest cells of a float16 policy to keep in
float32 so that it passes on a serving stack, each candidate proved by a real audit."""
