// A first cell: plain JavaScript with top-level await and return.
const squares = [1, 2, 3, 4].map((n) => n * n);
text(`squares: ${squares.join(", ")}`);
const total = await Promise.resolve(squares.reduce((a, b) => a + b, 0));
return { squares, total };
