// Express 4, installed under an alias to prove the middleware still works on it.
declare module 'express4' {
  import type { Express } from 'express';
  const express4: () => Express;
  export default express4;
}
